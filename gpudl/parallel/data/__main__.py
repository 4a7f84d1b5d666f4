"""``python -m gpudl.parallel.data`` (or under ``torchrun``): one data-parallel strategy,
checked step by step against one process (:func:`main`)."""

from gpudl.parallel.data.training import main

if __name__ == "__main__":  # not when a documentation tool imports it
    main()
