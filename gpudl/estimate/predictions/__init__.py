"""What the book's own models predict for each "Measured on a GPU" box, on its reference GPUs.

Book section: every chapter's "Measured on a GPU" boxes. Each prediction names the section whose
model it is: the bytes a kernel moves over the memory bandwidth (Chapters 1, 2, 4 and 9), the
roofline (*Chapter 2, "The roofline"*), the flop counts of *Chapter 3*, the ring all-reduce and
the step model of *Chapter 5*, the bubble of *Chapter 6*, and the counts of launches. One module
per part of the book: :mod:`.kernels` (Chapters 1 to 4) and :mod:`.systems` (Chapters 5 to 9)
hold the boxes' models, :mod:`.quantities` what a prediction is and the datasheet figures, and
:mod:`.boxes` the entry points.

:func:`predict` gives, for a box (a benchmark topic and one of its views, or the name that a box
without a benchmark gives with ``:predict:``; :data:`BOXES`), one :class:`Prediction` per
quantity: its value on each GPU of :data:`GPUS`, from the datasheets of
:data:`gpudl.hardware.SPECS` (and :data:`LINKS`), at the sizes the benchmark times on a GPU (its
module's constants), and whether it is a bound (what no GPU can beat) or an estimate (what the
model expects). :func:`measured_value` reads the same quantity from a stored run, so that a box
can set the two side by side; :func:`expected` prints a box's predictions for one GPU, as the
labs do. ``gpudl.estimate.published`` holds what others measured of the same quantities.
Nothing here times anything.

Since it reads the benchmarks' sizes, this package stands above :mod:`gpudl.bench`
(``tests/test_imports.py``), and :mod:`gpudl.estimate` does not re-export it.
"""

from importlib import import_module

from gpudl.estimate.predictions.boxes import *
from gpudl.estimate.predictions.quantities import *

#: The modules whose public names this package re-exports, in this order.
_MODULES = ("boxes", "quantities")
__all__ = [name for module in _MODULES
           for name in import_module(f"{__name__}.{module}").__all__]
