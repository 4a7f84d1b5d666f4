"""``torchrun --nproc_per_node=N -m gpudl.parallel.tensor``: both engines of tensor parallelism
against one process (:func:`main`)."""

from gpudl.parallel.tensor.training import main

main()
