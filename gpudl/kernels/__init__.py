"""CUDA kernels written in Numba, each with a NumPy reference and numbered variants.

Book section: Chapters 1 to 4 (one module per topic: ``elementwise`` in Chapter 1, "Threads,
blocks, grids and warps").
"""
