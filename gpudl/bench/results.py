"""Stored results: the checks a result file must pass, and the import of GPU runs made
elsewhere.

Book section: the "Measured on a GPU" boxes, which are drawn from ``results/*-cuda.json``
(README, "Running on a GPU").

:func:`load_record` reads one record and checks it by the one schema of stored results
(:func:`gpudl.bench.schema.check_record`, which :func:`gpudl.bench.write_results` and the
book's boxes apply too) and against its file's name. :func:`import_results` takes a GPU run
(a tar file or a folder holding ``results/*-cuda.json`` and, optionally, notebooks executed
there) and copies into this checkout every result that passes (the schema, backend ``cuda``,
a commit recorded, one record per topic) and every notebook that passes nbval here.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import zlib
from collections.abc import Sequence
from pathlib import Path

from gpudl.bench import RESULTS
from gpudl.bench.environment import ROOT
from gpudl.bench.schema import BAR_KEYS, ROW_KEYS, check_record
from gpudl.checks import check_instance

__all__ = ["ROW_KEYS", "BAR_KEYS", "check_record", "load_record", "import_results"]

def load_record(path: str | Path) -> dict:
    """The record stored at ``path``, checked by :func:`check_record` and against its name:
    ``<topic>-<backend>.json`` holds a record of that topic and backend (``ValueError``
    naming the file otherwise)."""
    path = Path(check_instance("path", path, (str, os.PathLike)))
    try:
        record = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise ValueError(f"{path}: not JSON ({err})") from None
    name = re.fullmatch(r"(?P<topic>[a-z0-9_]+)-(?P<backend>cuda|simulator)\.json", path.name)
    try:
        check_record(record, name["backend"] if name else None)
        if name and record["topic"] != name["topic"]:
            raise ValueError(f"topic: a {record['topic']!r} result must be named "
                             f"{record['topic']}-{record['backend']}.json")
    except ValueError as err:
        raise ValueError(f"{path}: {err}") from None
    return record


def _check_gpu_result(path: Path) -> dict:
    if not path.name.endswith("-cuda.json"):
        raise ValueError(f"{path.name}: a GPU result is named <topic>-cuda.json")
    return load_record(path)


def _passes_nbval(notebook: Path) -> tuple[bool, str]:
    """Run nbval on ``notebook`` here (this checkout's gpudl, the repository's sanitizer)."""
    path = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-o", "addopts=",
         "--nbval", "--nbval-current-env", "--nbval-sanitize-with",
         str(ROOT / "notebooks" / "sanitize.cfg"), str(notebook)],
        cwd=notebook.parent, capture_output=True, text=True, timeout=1800,
        env=os.environ | {"PYTHONPATH": path})
    lines = (done.stdout + done.stderr).strip().splitlines()
    return done.returncode == 0, lines[-1] if lines else ""


def _unpack(source: Path, into: Path) -> Path:
    """The folder of a GPU run: ``source`` itself, or the tar file ``source`` unpacked into
    ``into``. A tar that cannot be read whole (empty, garbage, truncated) or whose members
    would land outside ``into`` (absolute paths, ``..``, links out) is a ``ValueError``."""
    if source.is_dir():
        return source
    try:
        readable = tarfile.is_tarfile(source)
    except OSError as err:
        raise ValueError(f"{source}: cannot be read ({err})") from None
    if not readable:
        raise ValueError(f"{source} is neither a folder nor a tar file")
    root = into / "run"
    try:
        with tarfile.open(source) as tar:
            tar.extractall(root, filter="data")  # refuses members that escape root
    except tarfile.FilterError as err:
        raise ValueError(f"{source}: a member would be written outside the folder it is "
                         f"unpacked into ({err}); nothing was imported") from None
    except (tarfile.TarError, EOFError, OSError, zlib.error) as err:
        raise ValueError(f"{source}: not a complete tar file ({type(err).__name__}: {err}); "
                         "nothing was imported") from None
    return root


def import_results(source: str | Path, results: str | Path = RESULTS,
                   notebooks: str | Path = ROOT / "notebooks",
                   keep: Sequence[str] = ()) -> dict:
    """Copy the GPU results and notebooks of ``source`` (a tar file, or a folder) that pass
    their checks into ``results`` and ``notebooks``.

    A result (any ``*-cuda.json`` in it) is taken if :func:`load_record` accepts it (the one
    schema, backend ``cuda``, a commit recorded, the name matching the topic). Two results
    of one topic (two runs in one folder) are both refused unless ``keep`` names the one to
    take, by its path inside ``source`` as the refusal prints it. A notebook (any ``*.ipynb``
    named like one in ``notebooks``) is taken if it passes nbval here. Returns
    ``{"results": [...], "notebooks": [...], "rejected": {name: reason}}`` and prints it.
    ``FileNotFoundError`` for a missing ``source``; ``ValueError`` (after taking what passed)
    if anything was rejected, nothing was found, or ``source`` is not a readable folder or
    tar file (nothing is taken then)."""
    for name, value in (("source", source), ("results", results), ("notebooks", notebooks)):
        check_instance(name, value, (str, os.PathLike))
    source, results, notebooks = Path(source), Path(results), Path(notebooks)
    if isinstance(keep, str) or not isinstance(keep, Sequence):
        raise TypeError(f"keep must be a list of paths inside the source, got {keep!r}")
    if not source.exists():
        raise FileNotFoundError(f"{source} does not exist (a tar file or a folder expected)")
    with tempfile.TemporaryDirectory(prefix="gpudl-import-") as tmp:
        root = _unpack(source, Path(tmp))
        taken: dict = {"results": [], "notebooks": [], "rejected": {}}
        candidates = sorted(p for p in root.rglob("*-cuda.json") if p.is_file())
        by_name: dict[str, list[Path]] = {}
        for path in candidates:
            by_name.setdefault(path.name, []).append(path)
        kept = {str(Path(k)) for k in keep}
        unknown = kept - {str(p.relative_to(root)) for p in candidates}
        if unknown:
            raise ValueError(f"keep names {sorted(unknown)}, which {source} does not hold")
        for name, paths in by_name.items():
            chosen = [p for p in paths if str(p.relative_to(root)) in kept]
            if len(paths) > 1 and len(chosen) != 1:
                where = ", ".join(str(p.relative_to(root)) for p in paths)
                taken["rejected"][name] = (f"{len(paths)} results of one topic ({where}); "
                                           "name the one to take with keep (--keep PATH)")
                continue
            path = chosen[0] if chosen else paths[0]
            try:
                _check_gpu_result(path)
            except ValueError as err:
                taken["rejected"][name] = str(err).replace(f"{path}: ", "", 1)
                continue
            results.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, results / name)
            taken["results"].append(name)
        known = {p.name for p in notebooks.glob("*.ipynb")}
        found = sorted(p for p in root.rglob("*.ipynb") if p.is_file()
                       and ".ipynb_checkpoints" not in p.parts)
        for path in found:
            if path.name not in known:
                taken["rejected"][path.name] = f"not a notebook of {notebooks}"
                continue
            trial = Path(tmp) / "nbval" / path.name
            trial.parent.mkdir(exist_ok=True)
            shutil.copyfile(path, trial)
            ok, summary = _passes_nbval(trial)
            if not ok:
                taken["rejected"][path.name] = f"fails nbval here: {summary}"
                continue
            shutil.copyfile(path, notebooks / path.name)
            taken["notebooks"].append(path.name)
    for kind in ("results", "notebooks"):
        for name in taken[kind]:
            print(f"imported {name} into {results if kind == 'results' else notebooks}")
    for name, reason in taken["rejected"].items():
        print(f"rejected {name}: {reason}")
    if not candidates and not found:
        raise ValueError(f"{source} holds no *-cuda.json result and no notebook")
    if taken["rejected"]:
        raise ValueError(f"{len(taken['rejected'])} file(s) rejected (listed above); the others "
                         "were imported")
    return taken
