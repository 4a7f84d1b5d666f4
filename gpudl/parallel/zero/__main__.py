"""``python -m gpudl.parallel.zero`` (or under ``torchrun``): ZeRO stage 1 Adam against one
process's Adam (:func:`main`)."""

from gpudl.parallel.zero.training import main

if __name__ == "__main__":  # not when a documentation tool imports it
    main()
