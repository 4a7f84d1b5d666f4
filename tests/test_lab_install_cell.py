"""The labs' first code cell: written from _config.yml (book/_ext/gpudl_labs.py), never by
hand; off Colab it prints its stored output and installs nothing; on Colab it installs the
book's uploaded wheel, else the repository's address, else says in one line how to get the
wheel, and then runs ``python -m gpudl toolchain --install``."""

import fnmatch
import glob
import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "book" / "_ext"))
# the book's tools need docutils and Sphinx's parser, which a lent GPU machine's image lacks
pytest.importorskip("docutils")
pytest.importorskip("myst_parser")

import gpudl_labs  # noqa: E402
from gpudl_wheel import wheel_name  # noqa: E402
from IPython.core.interactiveshell import InteractiveShell  # noqa: E402

LABS = sorted(gpudl_labs.NOTEBOOKS.glob("*.ipynb"))
URL = "https://github.com/OWNER/gpudl"


def run(source: str, colab: bool, monkeypatch, wheels=()) -> list[str]:
    """Run a cell's source in IPython, with or without Colab and with the uploaded wheels
    ``wheels`` in /content: the ``%pip`` and ``!`` lines it ran, expanded as IPython expands
    them (pip and the shell themselves replaced by a record)."""
    calls = []
    shell = InteractiveShell.instance()
    shell.register_magic_function(lambda line: calls.append(f"%pip {line}"), "line", "pip")
    monkeypatch.setattr(shell, "system", lambda command: calls.append(
        "!" + shell.var_expand(command, depth=0)))
    if colab:
        monkeypatch.setitem(sys.modules, "google.colab", object())
    else:
        monkeypatch.delitem(sys.modules, "google.colab", raising=False)
    monkeypatch.setattr(glob, "glob", lambda pattern: fnmatch.filter(wheels, pattern))
    try:
        assert shell.run_cell(source).success
    finally:
        InteractiveShell.clear_instance()
    return calls


@pytest.mark.parametrize("path", LABS, ids=lambda p: p.name)
def test_every_lab_s_first_code_cell_is_the_one_config_makes(path):
    cell = gpudl_labs.first_code_cell(json.loads(path.read_text()))
    assert "".join(cell["source"]) == gpudl_labs.first_cell(gpudl_labs.repository_url(),
                                                           wheel_name()), (
        f"{path.name}: run `python book/_ext/gpudl_po.py notebooks` (make po, make notebooks)")
    assert cell["execution_count"] == 1
    assert cell["outputs"] == [{"name": "stdout", "output_type": "stream",
                                "text": [gpudl_labs.NOT_ON_COLAB + "\n"]}]


def test_off_colab_the_cell_prints_its_stored_output_and_installs_nothing(monkeypatch, capsys):
    for url in ("", URL):
        assert run(gpudl_labs.first_cell(url, wheel_name()), False, monkeypatch) == []
        assert capsys.readouterr().out == gpudl_labs.NOT_ON_COLAB + "\n"


def test_on_colab_without_an_address_the_cell_says_how_to_get_the_wheel(monkeypatch, capsys):
    calls = run(gpudl_labs.first_cell("", wheel_name()), True, monkeypatch)
    out = capsys.readouterr().out
    assert calls == [] and out.count("\n") == 1
    assert f"Upload {wheel_name()}" in out and f"%pip install /content/{wheel_name()}" in out


def test_on_colab_the_cell_installs_the_uploaded_wheel_then_the_cuda_pieces(monkeypatch):
    for url in ("", URL):
        calls = run(gpudl_labs.first_cell(url, wheel_name()), True, monkeypatch,
                    wheels=["/content/gpudl-0.0.9-py3-none-any.whl",
                            f"/content/{wheel_name()}", "/content/other.whl"])
        assert calls == [f"%pip install --quiet /content/{wheel_name()}",
                         f"!{sys.executable} -m gpudl toolchain --install"]


def test_on_colab_with_an_address_the_cell_installs_from_it(monkeypatch):
    calls = run(gpudl_labs.first_cell(URL, wheel_name()), True, monkeypatch)
    assert calls == [f'%pip install --quiet "gpudl @ git+{URL}"',
                     f"!{sys.executable} -m gpudl toolchain --install"]


def test_the_address_is_config_s_setting(tmp_path, monkeypatch):
    (tmp_path / "_config.yml").write_text(f"title: x\nrepository:\n  url: {URL}/\n")
    monkeypatch.setattr(gpudl_labs, "ROOT", tmp_path)
    assert gpudl_labs.repository_url() == URL
    (tmp_path / "_config.yml").write_text('repository:\n  url: ""\n')
    assert gpudl_labs.repository_url() == ""


def test_every_line_of_the_cell_fits_a_code_listing():
    for url in ("", URL):
        assert max(map(len, gpudl_labs.first_cell(url, wheel_name()).splitlines())) <= 97
