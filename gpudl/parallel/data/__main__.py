"""``python -m gpudl.parallel.data`` (or under ``torchrun``): one data-parallel strategy,
checked step by step against one process (:func:`main`)."""

from gpudl.parallel.data.training import main

main()
