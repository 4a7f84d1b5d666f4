"""Triton kernels beside their Numba twins: one program per tile of values instead of one thread
per value.

Book section: Chapter 10, "Tiles instead of threads" (one module per topic: ``elementwise`` in
"A program owns a block of values", ``reduction``, the sum and the row softmax, in "Reductions
inside a block", ``matmul`` in "A matmul of tiles", ``adam``, ``attention``,
``attention_backward`` and ``decode`` in "What it leaves to the author").

Each kernel is registered with :func:`gpudl.registry.triton_kernel` and launched by a variant
of its family (``vector_add_v5_triton_block``...), so that the family's entry point, tests,
benchmark and API checks reach it as they reach the Numba variants. :mod:`.runtime` holds
Triton (or its stand-ins where it is not installed) and the one launch every launcher makes.
"""
