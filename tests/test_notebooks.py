"""Notebook hygiene: stored executed, in order, no errors, tags not comments, in the book."""

import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))


def code_cells(path: Path) -> list[dict]:
    nb = json.loads(path.read_text())
    return [c for c in nb["cells"] if c["cell_type"] == "code"]


def test_there_are_notebooks():
    assert NOTEBOOKS, "no notebooks found"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_every_code_cell_is_stored_executed_in_order(path):
    counts = [c["execution_count"] for c in code_cells(path)]
    assert None not in counts, f"{path.name}: unexecuted cells (nbval would only run them)"
    assert counts == list(range(1, len(counts) + 1)), f"{path.name}: not executed top to bottom"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_no_error_outputs_unless_tagged(path):
    for cell in code_cells(path):
        tags = cell.get("metadata", {}).get("tags", [])
        errors = [o for o in cell["outputs"] if o["output_type"] == "error"]
        if "raises-exception" in tags:
            assert errors, "a raises-exception cell must store the error it raises"
        else:
            assert not errors, "".join(cell["source"])[:200]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_nbval_markers_are_tags_not_comments(path):
    for cell in code_cells(path):
        assert "NBVAL_" not in "".join(cell["source"])


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_no_matplotlib_reprs_in_text_outputs(path):
    # nbval compares text/plain: "[<matplotlib.lines.Line2D at 0x...>]" would differ every run
    for cell in code_cells(path):
        for out in cell["outputs"]:
            text = "".join(out.get("data", {}).get("text/plain", ""))
            assert not re.search(r"<matplotlib\.", text), "end plotting cells with plt.show()"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_is_in_the_book_and_asks_colab_for_a_gpu(path):
    toc = (ROOT / "_toc.yml").read_text()
    assert f"notebooks/{path.stem}" in toc
    meta = json.loads(path.read_text())["metadata"]
    assert meta.get("accelerator") == "GPU"
    assert meta["kernelspec"]["name"] == "python3"
