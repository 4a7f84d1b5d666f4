"""The predicted half of a "Measured on a GPU" box: what the book's own models predict for its
reference GPUs, what others published of the same quantities, and, once a run is stored, the
measured values beside the predicted ones with their ratio.

The numbers come from ``gpudl.estimate.predictions`` (:func:`predict`, evaluated from the
datasheets at the benchmark's sizes) and ``gpudl.estimate.published``; this module only lays
them out as MyST (``gpudl_measured`` puts them into the box). Its words, and the package's
phrases (each prediction's quantity and model, each published quantity and unit), are written
in the edition the box is drawn for (``gpudl_extension_text``); a benchmark row's name, a GPU's
name and the numbers stay as they are.
"""

from __future__ import annotations

from collections.abc import Iterator

from gpudl_extension_text import message, tr, translated

from gpudl.estimate import predictions
from gpudl.estimate.predictions import GPUS, Prediction, shown

#: A prediction's kind, in the boxes' words.
KINDS = {"bound": message("bound"), "estimate": message("estimate")}


def _quantity(p: Prediction) -> str:
    """A row's name as code; a phrase in the current edition, its placeholders filled."""
    if p.quantity in p.rows:
        return f"`{p.quantity}`"
    return translated(p.quantity, **dict(p.fields))


def _with_unit(value: float, unit: str) -> str:
    """``value`` in ``unit``, joined by a no-break space (a table cell never parts them)."""
    return f"{shown(value, unit)}\u00a0{translated(unit)}" if unit else shown(value, unit)


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return lines + ["| " + " | ".join(cells) + " |" for cells in rows]


def prediction_table(topic: str, view: str | None) -> list[str]:
    """The box's predictions for every reference GPU, with their models and sections."""
    rows = [[_quantity(p), *(_with_unit(v, p.unit) for v in p.values),
             tr("*{kind}*: {model} ({section})", kind=translated(KINDS[p.kind]),
                model=translated(p.model), section=f"{{ref}}`{p.section}`")]
            for p in predictions.predict(topic, view)]
    intro = tr("**Predicted** by the book's own models for its reference GPUs, from their "
               "datasheets: a prediction, not a measurement (a *bound* is what no run can "
               "beat, an *estimate* what the model expects).")
    return [intro, "", *_table([tr("quantity"), *GPUS, tr("model (its section)")], rows)]


def published_list(topic: str, view: str | None) -> list[str]:
    """Others' measurements of the box's quantities, each cited, marked as theirs."""
    found = predictions.published(topic, view)
    if not found:
        return []
    lines = [tr("**Published** measurements of the same quantities, theirs and not this "
                "book's:"), ""]
    for p in found:
        fields = {"quantity": translated(p.quantity), "value": f"{p.value:,g}",
                  "unit": translated(p.unit), "cite": f"{{cite}}`{p.source}`",
                  "hardware": p.hardware}
        if p.where:
            lines.append("- " + tr("{quantity}: **{value} {unit}**, reported by {cite} on "
                                   "{hardware} (`{where}`).", where=p.where, **fields))
        else:
            lines.append("- " + tr("{quantity}: **{value} {unit}**, reported by {cite} on "
                                   "{hardware}.", **fields))
    return lines


def _measured_rows(topic: str, view: str, record: dict, index: int) -> Iterator[list[str]]:
    """One table row per benchmark row (or record value) that a prediction names and the
    stored ``record`` measured: measured, predicted (on the GPU ``GPUS[index]``), ratio."""
    for p in predictions.predict(topic, view):
        for row in p.rows or (None,):
            measured = predictions.measured_value(p, record, row)
            if measured is None:
                continue
            predicted = p.values[index]
            name = f"`{row}`" if row is not None and p.over is None else _quantity(p)
            yield [name, _with_unit(measured, p.unit), _with_unit(predicted, p.unit),
                   f"{measured / predicted:.2f}", translated(KINDS[p.kind])]


def measured_against_predicted(topic: str, view: str, record: dict) -> list[str]:
    """A stored run's values beside the predictions for its GPU and their ratio, or, for a
    GPU the book does not predict, why not and the predictions for its reference GPUs."""
    machine = record["machine"]
    gpu = predictions.reference_gpu(machine["gpu"],
                                    (machine.get("device") or {}).get("memory_bytes"))
    if gpu is None:
        return [tr("No prediction for **{gpu}**: the book's models are evaluated for the "
                   "{first} and the {second} only.", gpu=machine["gpu"], first=GPUS[0],
                   second=GPUS[1]), "", *prediction_table(topic, view)]
    rows = list(_measured_rows(topic, view, record, GPUS.index(gpu)))
    if not rows:
        return [tr("The stored run has none of the quantities the book's models predict "
                   "for the {gpu}.", gpu=gpu), "", *prediction_table(topic, view)]
    intro = tr("**Measured against predicted** on the {gpu}: where the ratio is far from 1, "
               "the model missed something, which is the lesson.", gpu=gpu)
    return [intro, "", *_table([tr("row"), tr("measured"), tr("predicted"),
                                tr("measured / predicted"), tr("kind")], rows)]
