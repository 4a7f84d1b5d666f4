"""``torchrun --nproc_per_node=N -m gpudl.parallel.experts``: expert parallelism against one
process (:func:`main`)."""

from gpudl.parallel.experts.training import main

if __name__ == "__main__":  # not when a documentation tool imports it
    main()
