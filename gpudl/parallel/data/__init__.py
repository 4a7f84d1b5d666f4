"""Data parallelism: every rank holds the whole model, trains on its share of each global batch
and averages its gradients with the others, proven equal to one process on the whole batch.

Book section: *Chapter 5, "Data parallelism"* (and *"The backward pass across GPUs"* for the
gradient timeline). One module per topic:

* :mod:`.sampling`: the setup, its data set, and who trains on what (``DistributedSampler``);
* :mod:`.comms`: the collectives: the ring all-reduce from sends and receives, the broadcast
  and the replica check;
* :mod:`.timeline`: when DDP's gradients become ready and its buckets are all-reduced;
* :mod:`.buckets`: gradient buckets by hand (each ``.grad`` a view of its bucket, or packed by
  a kernel of :mod:`gpudl.kernels.buckets`);
* :mod:`.training`: the four strategies (``single``, ``manual``, ``bucketed``, ``ddp``), run
  and compared; ``torchrun --standalone --nproc_per_node=4 -m gpudl.parallel.data --strategy
  ddp`` runs one under ``torchrun``.

Every public name is importable from :mod:`gpudl.parallel.data` itself.
"""

from gpudl.parallel.data.buckets import BUCKET_VARIANTS, GradientBuckets, kernel_stream, rank_device
from gpudl.parallel.data.comms import (
    broadcast_parameters,
    check_replicas,
    ring_all_reduce,
    ring_all_reduce_check,
    ring_all_reduce_worker,
    ring_chunks,
)
from gpudl.parallel.data.sampling import (
    Setup,
    check_plan,
    global_order,
    make_dataset,
    rank_indices,
    sampler_plan,
)
from gpudl.parallel.data.timeline import expected_buckets, gradient_timeline, timeline_worker
from gpudl.parallel.data.training import (
    STRATEGIES,
    TOLERANCE,
    Replica,
    check_strategy,
    compare,
    main,
    run,
    run_many,
    run_worker,
    train_worker,
)

__all__ = [
    "BUCKET_VARIANTS",
    "STRATEGIES",
    "TOLERANCE",
    "GradientBuckets",
    "Replica",
    "Setup",
    "broadcast_parameters",
    "check_plan",
    "check_replicas",
    "check_strategy",
    "compare",
    "expected_buckets",
    "global_order",
    "gradient_timeline",
    "kernel_stream",
    "main",
    "make_dataset",
    "rank_device",
    "rank_indices",
    "ring_all_reduce",
    "ring_all_reduce_check",
    "ring_all_reduce_worker",
    "ring_chunks",
    "run",
    "run_many",
    "run_worker",
    "sampler_plan",
    "timeline_worker",
    "train_worker",
]
