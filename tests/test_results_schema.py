"""The one schema of stored results (gpudl.bench.schema.check_record), as write_results, the
import of GPU runs and the book's boxes apply it; and the import's refusals of sources it cannot
trust (two records of one topic, bad or escaping tar files), each one line with exit status 2
from the command line."""

import copy
import gzip
import io
import json
import sys
import tarfile
from pathlib import Path

import pytest

import gpudl.bench
from gpudl.__main__ import main
from gpudl.bench import write_results
from gpudl.bench.results import import_results, load_record
from gpudl.bench.schema import check_record

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "book" / "_ext"))

import gpudl_measured  # noqa: E402


def _with(record, **row_changes):
    record = copy.deepcopy(record)
    record["rows"][1].update(row_changes)
    return record


@pytest.mark.parametrize(("change", "field"), [
    ({"median_s": float("nan")}, "median_s"), ({"median_s": 0.0}, "median_s"),
    ({"gbps": float("inf")}, "gbps"), ({"gbps": 0.0}, "gbps"), ({"runs": True}, "runs"),
    ({"runs": 2.5}, "runs"), ({"bytes": 1.5}, "bytes"), ({"min_s": 1.0}, "min_s <= median_s"),
    ({"max_s": 1e-9}, "min_s <= median_s"), ({"meaningful": "yes"}, "meaningful")])
def test_impossible_rows_are_refused_naming_the_field(fake_cuda_record, change, field):
    with pytest.raises(ValueError, match=rf"rows\[1\] \(vector_add_v2_grid_stride\): .*{field}"):
        check_record(_with(fake_cuda_record(), **change))


def test_a_gpu_record_needs_a_commit_and_a_positive_threshold(fake_cuda_record):
    with pytest.raises(ValueError, match="commit"):
        check_record(fake_cuda_record() | {"commit": None})
    bad = fake_cuda_record()
    bad["bars"][0]["threshold"] = float("nan")
    with pytest.raises(ValueError, match=r"bars\[0\].*threshold"):
        check_record(bad)
    with pytest.raises(ValueError, match="backend must be 'simulator' here"):
        check_record(fake_cuda_record(), backend="simulator")


def test_write_results_refuses_a_nan_and_writes_nothing(tmp_path):
    timing = gpudl.bench.timing.Timing((1e-3, 2e-3), "wall-clock", False)
    body = {"rows": [gpudl.bench.row("x", timing) | {"max_s": float("nan")}], "bars": []}
    with pytest.raises(ValueError, match=r"rows\[0\] \(x\): max_s must be a number > 0"):
        write_results("memory", body, tmp_path)
    assert not list(tmp_path.iterdir())


def test_a_file_holds_the_backend_and_topic_its_name_says(tmp_path, fake_cuda_record):
    sim = fake_cuda_record() | {"backend": "simulator", "timings_meaningful": False}
    sim["machine"] = dict(sim["machine"], backend="simulator", gpu=None)
    sim["bars"] = [dict(b, ratio=None, verdict=None) for b in sim["bars"]]
    for row in sim["rows"]:
        row.update(meaningful=False, gbps=None)
    (tmp_path / "elementwise-cuda.json").write_text(json.dumps(sim))
    with pytest.raises(ValueError, match="elementwise-cuda.json: backend must be 'cuda'"):
        load_record(tmp_path / "elementwise-cuda.json")
    (tmp_path / "memory-cuda.json").write_text(json.dumps(fake_cuda_record()))
    with pytest.raises(ValueError, match="topic: a 'elementwise' result must be named"):
        load_record(tmp_path / "memory-cuda.json")


def _run_folder(path, record):
    (path / "results").mkdir(parents=True)
    (path / "results" / f"{record['topic']}-cuda.json").write_text(json.dumps(record))


def test_import_refuses_a_nan_row_with_one_line_and_status_2(tmp_path, fake_cuda_record,
                                                             capsys):
    record = fake_cuda_record()
    record["rows"][0]["median_s"] = float("nan")  # json writes NaN, which no run can give
    _run_folder(tmp_path / "run", record)
    code = main(["results", "import", str(tmp_path / "run"), "--results",
                 str(tmp_path / "results")])
    out = capsys.readouterr()
    assert code == 2 and not (tmp_path / "results").exists()
    assert out.err.splitlines() == ["python -m gpudl results import: error: 1 file(s) rejected "
                                    "(listed above); the others were imported"]
    assert "rejected elementwise-cuda.json: rows[0] (vector_add_v1_naive): median_s" in out.out


def test_two_records_of_one_topic_are_refused_unless_one_is_kept(tmp_path, fake_cuda_record):
    first, second = fake_cuda_record(), fake_cuda_record() | {"date": "2026-12-02T00:00:00"}
    _run_folder(tmp_path / "src" / "a", first)
    _run_folder(tmp_path / "src" / "b", second)
    results = tmp_path / "results"
    with pytest.raises(ValueError, match="1 file.s. rejected"):
        import_results(tmp_path / "src", results, tmp_path)
    assert not results.exists()
    taken = import_results(tmp_path / "src", results, tmp_path,
                           keep=["b/results/elementwise-cuda.json"])
    assert taken["results"] == ["elementwise-cuda.json"]
    assert load_record(results / "elementwise-cuda.json")["date"] == "2026-12-02T00:00:00"
    with pytest.raises(ValueError, match="keep names"):
        import_results(tmp_path / "src", results, tmp_path, keep=["c/x-cuda.json"])


def _tar_with(path, add):
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        add(tar)
    path.write_bytes(buffer.getvalue())
    return path


def _member(tar, name, data=b"{}", **fields):
    info = tarfile.TarInfo(name)
    info.size = len(data)
    for key, value in fields.items():
        setattr(info, key, value)
    tar.addfile(info, io.BytesIO(data) if info.isfile() else None)


@pytest.mark.parametrize("make", ["empty", "garbage", "truncated", "escaping", "absolute",
                                  "link out"])
def test_bad_tar_files_are_one_line_and_status_2(tmp_path, fake_cuda_record, capsys, make):
    path = tmp_path / "run.tar"
    if make == "empty":
        path.write_bytes(b"")
    elif make == "garbage":
        path.write_bytes(b"not a tar file at all" * 100)
    elif make == "truncated":
        data = json.dumps(fake_cuda_record()).encode() * 50
        _tar_with(tmp_path / "whole.tar",
                  lambda tar: _member(tar, "results/elementwise-cuda.json", data))
        whole = gzip.compress((tmp_path / "whole.tar").read_bytes())
        path = tmp_path / "run.tar.gz"
        path.write_bytes(whole[: len(whole) // 2])
    elif make == "escaping":
        _tar_with(path, lambda tar: _member(tar, "../elementwise-cuda.json"))
    elif make == "absolute":
        _tar_with(path, lambda tar: _member(tar, "/tmp/gpudl-absolute-cuda.json"))
    else:
        _tar_with(path, lambda tar: _member(tar, "results/link-cuda.json", b"",
                                            type=tarfile.SYMTYPE, linkname="/etc/passwd"))
    code = main(["results", "import", str(path), "--results", str(tmp_path / "results")])
    err = capsys.readouterr().err
    assert code == 2 and not (tmp_path / "results").exists()
    assert len(err.splitlines()) == 1 and err.startswith("python -m gpudl results import:")
    assert not Path("/tmp/gpudl-absolute-cuda.json").exists()
    assert not (tmp_path / "elementwise-cuda.json").exists()


@pytest.mark.parametrize("argv", [["bench", "nonsense"], ["results", "import", "/nonexistent"],
                                  ["notebooks", "99-none"], ["estimate", "mfu", "--gpus", "x"],
                                  ["estimate", "memory", "--params", "-1"], ["ptx", "nonsense"],
                                  ["results", "export", "x"], ["bench", "memory", "--fresh=1"]])
def test_every_command_refuses_a_bad_argument_with_one_line_and_status_2(argv, capsys):
    try:
        code = main(argv)
    except SystemExit as exit_:
        code = exit_.code
    err = capsys.readouterr().err
    assert code == 2, err
    assert len(err.splitlines()) == 1 and ": error: " in err


def test_a_box_names_the_file_and_field_of_a_record_it_cannot_draw(tmp_path, fake_cuda_record):
    record = fake_cuda_record("matmul") | {"sizes": [64]}
    record["rows"] = [dict(r, size=64, variant="v1_naive", tflops=1.0) for r in
                      record["rows"][:1]]  # no torch row to compare with
    with pytest.raises(gpudl_measured.MalformedRecord,
                       match=r"results/matmul-cuda.json: field .*rows.*no reference row"):
        gpudl_measured.box_markdown("matmul", "gflops", record, tmp_path)
    del record["sizes"]
    with pytest.raises(gpudl_measured.MalformedRecord, match=r"field \['sizes'\]: KeyError"):
        gpudl_measured.box_markdown("matmul", "gflops", record, tmp_path)
