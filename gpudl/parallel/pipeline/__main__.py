"""``python -m gpudl.parallel.pipeline SCHEDULE M`` (or under ``torchrun``): one hand-written
schedule, timed (:func:`main`)."""

from gpudl.parallel.pipeline.training import main

if __name__ == "__main__":  # not when a documentation tool imports it
    main()
