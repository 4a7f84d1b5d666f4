"""Each box's predictions, what a stored run measured of them, and the lines a lab prints.

Book section: every chapter's "Measured on a GPU" boxes (:mod:`gpudl.estimate.predictions`).
"""

from __future__ import annotations

from functools import cache

from gpudl.bench import tensorcores
from gpudl.checks import check_choice, check_instance
from gpudl.estimate.predictions.kernels import BUILDERS as KERNEL_BUILDERS
from gpudl.estimate.predictions.quantities import GPUS, Prediction, shown
from gpudl.estimate.predictions.systems import BUILDERS as SYSTEM_BUILDERS
from gpudl.estimate.published import PUBLISHED, Published

__all__ = ["BOXES", "expected", "measured_value", "predict", "published", "reference_gpu"]

#: A stored row's field -> the SI units of one of its units (the others are plain numbers).
_FIELD_SI = {"median_s": 1.0, "min_s": 1.0, "time_s": 1.0, "makespan_s": 1.0, "gbps": 1e9,
             "busbw_gbs": 1e9, "gbs": 1e9, "register_file_gbs": 1e9, "tflops": 1e12}

#: Every box that has predictions, as ``(topic, view)`` (``view`` ``None`` for a box with no
#: benchmark): the book's boxes, each of which shows its predictions.
BOXES: tuple[tuple[str, str | None], ...] = (*KERNEL_BUILDERS, *SYSTEM_BUILDERS)
_BUILDERS = KERNEL_BUILDERS | SYSTEM_BUILDERS


def _check_box(topic: object, view: object) -> tuple[str, str | None]:
    topics = tuple(dict.fromkeys(t for t, _ in BOXES))
    check_choice("topic", topic, topics)
    check_choice("view", view, tuple(v for t, v in BOXES if t == topic))
    return topic, view


def predict(topic: str, view: str | None = None) -> tuple[Prediction, ...]:
    """The predictions of the box of benchmark ``topic``'s ``view``, or of the box without a
    benchmark called ``topic`` (``view`` ``None``): one :class:`Prediction` per quantity, each
    with its value on every GPU of :data:`GPUS`."""
    return _predict(*_check_box(topic, view))


@cache
def _predict(topic: str, view: str | None) -> tuple[Prediction, ...]:
    return tuple(_BUILDERS[topic, view]())


def published(topic: str, view: str | None = None) -> tuple[Published, ...]:
    """What others measured of the box's quantities (:data:`gpudl.estimate.PUBLISHED`)."""
    box = _check_box(topic, view)
    return tuple(p for p in PUBLISHED if p.box == box)


def _quantity(prediction: Prediction) -> str:
    text = prediction.quantity.format(**dict(prediction.fields))
    return f"`{text}`" if text in prediction.rows else text


def expected(topic: str, view: str | None = None, gpu: str = "H100 SXM") -> str:
    """The box's predictions for ``gpu`` (one of :data:`GPUS`) as plain text, one line per
    quantity with its model and section: what a lab prints beside its "not measured" line."""
    predictions = predict(topic, view)
    index = GPUS.index(check_choice("gpu", gpu, GPUS))
    lines = [f"What the book's models predict on an {gpu} (not a measurement):"]
    for p in predictions:
        value = f"{shown(p.values[index], p.unit)} {p.unit}".rstrip()
        line = f"  {_quantity(p)}: {value} ({p.kind}: {p.model}; section {p.section})"
        lines.append(line.replace("`", ""))  # plain text: no code marks
    return "\n".join(lines)


def _lookup(container: object, key: str) -> object:
    if isinstance(container, dict):
        return container.get(key)
    if isinstance(container, list):
        return next((r for r in container if isinstance(r, dict) and r.get("name") == key),
                    None)
    return None


def measured_value(prediction: Prediction, record: dict, row: str | None = None
                   ) -> float | None:
    """What a stored run (``record``, a ``results/TOPIC-cuda.json``) measured of
    ``prediction``, in SI units, or ``None`` where it holds no number: the value at the
    prediction's ``path``, or ``field`` of its row ``row`` (the first of its rows by default;
    the rows of a topic are in the record's ``rows``, a point-to-point row in its ``p2p``, an
    all-to-all's in its ``all_to_all``),
    over the same field of the row ``over`` for a ratio."""
    check_instance("prediction", prediction, Prediction)
    check_instance("record", record, dict)
    if prediction.path:
        value: object = record
        for key in prediction.path:
            value = _lookup(value, key)
        scale = _FIELD_SI.get(prediction.path[-1], 1.0)
        return None if not isinstance(value, int | float) else float(value) * scale
    row = prediction.rows[0] if row is None else check_choice("row", row, prediction.rows)

    def field(name: str) -> float | None:
        found = (_lookup(record.get("rows"), name) or _lookup(record.get("p2p") or [], name)
                 or _lookup(record.get("all_to_all") or [], name))
        value = None if found is None else found.get(prediction.field)
        return None if not isinstance(value, int | float) else float(value)

    value = field(row)
    if value is None or prediction.over is None:
        return None if value is None else value * _FIELD_SI.get(prediction.field, 1.0)
    denominator = field(prediction.over)
    return None if not denominator else value / denominator


def reference_gpu(name: str, memory_bytes: int | None = None) -> str | None:
    """The GPU of :data:`GPUS` that a device called ``name`` by its driver is ("NVIDIA H200"
    is the H200 SXM), by :func:`gpudl.bench.tensorcores.datasheet_spec`; ``None`` for a GPU
    the book has no prediction for."""
    spec = tensorcores.datasheet_spec(name, memory_bytes)
    return spec.name if spec is not None and spec.name in GPUS else None
