"""``python -m gpudl.parallel.pipeline SCHEDULE M`` (or under ``torchrun``): one hand-written
schedule, timed (:func:`main`)."""

from gpudl.parallel.pipeline.training import main

main()
