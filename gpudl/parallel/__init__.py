"""Distributed training with torch.distributed: launching workers, collectives, and the
parallel strategies built on them.

Book section: *Chapter 1, "What connects GPUs"*, *Chapter 5, "Data parallelism"* and
*Chapter 6, "Model parallelism"*.

Every worker here has the signature ``worker(rank, world_size, *args)`` and runs either from a
notebook through :func:`gpudl.parallel.launch.spawn` or from a script started with ``torchrun``
through :func:`gpudl.parallel.launch.run_under_torchrun`.
"""
