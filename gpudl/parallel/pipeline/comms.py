"""The pipeline's collectives: a stage's sends and its next receive, posted together.

Book section: *Chapter 6, "Pipeline parallelism"*.
"""

from __future__ import annotations

import torch
import torch.distributed as dist

__all__ = ["exchange"]


def exchange(sends: list[tuple[torch.Tensor, int]], recv: tuple[torch.Tensor, int] | None
              ) -> list[dist.Work]:
    """Post this stage's pending sends together with its next receive, wait for the receive,
    and return the sends' handles (their tensors must stay alive until they are waited for).

    The stage does not wait for its sends, so it can run ahead of its neighbours (as a GPU
    stage does: NCCL sends run on their own stream). Posting a send and a receive as one batch
    matters on NCCL: two neighbours that each sent to the other and waited for the send before
    posting the receive (1F1B's steady state) would deadlock."""
    ops = [dist.P2POp(dist.isend, tensor, peer) for tensor, peer in sends]
    if recv is not None:
        ops.append(dist.P2POp(dist.irecv, *recv))
    works = dist.batch_isend_irecv(ops) if ops else []
    if recv is not None:
        works.pop().wait()
    return works
