"""Triton kernels beside their Numba twins: one program per tile of values instead of one thread
per value.

Book section: a Triton section in each of Chapters 1 to 4, 8 and 9, named in each module's
docstring (one module per topic: ``elementwise`` in Chapter 1, ``reduction``, the sum and the
row softmax, in Chapter 2, ``matmul`` in Chapter 3, ``adam`` in Chapter 4, ``attention`` and
``attention_backward`` in Chapter 8, ``decode`` in Chapter 9).

Each kernel is registered with :func:`gpudl.registry.triton_kernel` and launched by a variant
of its family (``vector_add_v5_triton_block``...), so that the family's entry point, tests,
benchmark and API checks reach it as they reach the Numba variants. :mod:`.runtime` holds
Triton (or its stand-ins where it is not installed) and the one launch every launcher makes.
"""
