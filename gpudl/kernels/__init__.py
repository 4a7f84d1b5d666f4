"""CUDA kernels written in Numba, each with a NumPy reference and numbered variants.

Book section: Chapters 1 to 4, 8, 9 and 11 (one module per topic: ``elementwise`` in Chapter 1,
"Threads, blocks, grids and warps"; ``attention`` and ``tensor_core_matmul`` in Chapter 8;
``decode``, ``paged`` and ``quant`` in Chapter 9; ``experts`` in Chapter 11).
"""
