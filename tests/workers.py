"""Workers the tests spawn (a worker is imported by name in each rank, so it lives in a
module, not in a test function)."""

import torch.distributed as dist


def hello(rank: int, world_size: int) -> tuple[int, int, str]:
    """The smallest worker: each rank says who it is and which backend its group uses."""
    return rank, world_size, dist.get_backend()
