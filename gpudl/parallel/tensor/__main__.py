"""``torchrun --nproc_per_node=N -m gpudl.parallel.tensor``: both engines of tensor parallelism
against one process (:func:`main`)."""

from gpudl.parallel.tensor.training import main

if __name__ == "__main__":  # not when a documentation tool imports it
    main()
