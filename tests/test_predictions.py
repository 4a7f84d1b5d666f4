"""gpudl.estimate.predictions and the predicted half of the book's boxes
(book/_ext/gpudl_predicted.py): every box of the book shows what the chapter's model predicts,
the numbers it shows are the package's, a stored run is set beside them with the ratio, and the
predictions agree with hand derivations from the datasheets."""

import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "book" / "_ext"))

import gpudl_extension_text  # noqa: E402
import gpudl_measured  # noqa: E402
import gpudl_predicted  # noqa: E402
from zh_text import english_sentences  # noqa: E402

from gpudl import registry  # noqa: E402
from gpudl.bench import elementwise, memory  # noqa: E402
from gpudl.estimate import PUBLISHED, predictions  # noqa: E402
from gpudl.estimate.predictions import GPUS, Prediction, predict, shown  # noqa: E402

H100, H200 = 3.35e12, 4.8e12  # the datasheets' memory bandwidth, bytes/s
BOX = re.compile(r"```\{gpudl-measured\}(.*)\n((?::[\w-]+:.*\n)*)")


def book_boxes() -> list[tuple[str, str | None]]:
    """Each ``{gpudl-measured}`` box of the book: its topic and view, or its ``:predict:`` name
    (with ``None``), or ``(None, None)``."""
    found = []
    for page in sorted((ROOT / "book").glob("*.md")):
        for arguments, options in BOX.findall(page.read_text()):
            named = re.search(r":predict:\s*(\S+)", options)
            topic, view = (arguments.split() + [None, None])[:2]
            found.append((topic, view) if topic else ((named.group(1), None) if named
                                                      else (None, None)))
    return found


def test_every_box_of_the_book_shows_a_prediction_and_each_is_shown_once():
    boxes = book_boxes()
    assert len(boxes) == 33
    assert sorted(boxes, key=str) == sorted(predictions.BOXES, key=str)


def _cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("|").split("|")]


@pytest.mark.parametrize("language", ["en", "zh_CN"])
def test_every_box_shows_the_package_s_predictions_for_both_gpus(tmp_path, language):
    """Drawn without a stored run, each box's table holds, row for row, the values of
    ``predict`` on each reference GPU, with the model's phrase and its section; published
    measurements are cited; and the box ends with how to measure it."""
    words = gpudl_extension_text.Words(language)
    for topic, view in predictions.BOXES:
        with_topic = view is not None
        lines = gpudl_measured.box_markdown(topic if with_topic else None, view, None, tmp_path,
                                            None if with_topic else "x", language,
                                            lambda text: None if text == "x" else
                                            pytest.fail(f"untranslated: {text!r}"),
                                            None if with_topic else topic)
        header = next(i for i, line in enumerate(lines) if line.startswith("| "))
        rows = [_cells(line) for line in lines[header + 2:] if line.startswith("| ")]
        shown_predictions = predict(topic, view)
        assert len(rows) == len(shown_predictions), (topic, view)
        for cells, p in zip(rows, shown_predictions, strict=True):
            unit = words(p.unit) if p.unit else ""
            assert cells[1:1 + len(GPUS)] == [f"{shown(v, p.unit)}\u00a0{unit}".rstrip()
                                              for v in p.values], (topic, view, cells)
            assert cells[-1] == words("*{kind}*: {model} ({section})", kind=words(p.kind),
                                      model=words(p.model),
                                      section=f"{{ref}}`{p.section}`"), (topic, view, cells)
        text = "\n".join(lines)
        for found in predictions.published(topic, view):
            assert f"{{cite}}`{found.source}`" in text and f"{found.value:,g}" in text
        assert words(gpudl_measured.NOT_MEASURED) in lines[-1], (topic, view)
        if language == "zh_CN":  # its words all Chinese (code and cited names aside)
            prose = re.sub(r"`[^`]*`", " ", text)
            assert english_sentences(prose) == [], (topic, view, text)


def test_each_section_a_prediction_links_to_is_a_label_of_the_book():
    labels = set(re.findall(r"^\(([\w-]+)\)=$", "\n".join(
        p.read_text() for p in (ROOT / "book").glob("*.md")), re.M))
    sections = {p.section for box in predictions.BOXES for p in predict(*box)}
    assert sections <= labels, sections - labels
    assert all(p.box in predictions.BOXES for p in PUBLISHED)
    bib = (ROOT / "book" / "references.bib").read_text()
    assert all(f"{{{p.source}," in bib for p in PUBLISHED)


def test_the_predictions_equal_hand_derivations_from_the_datasheets():
    by = {p.quantity: p for p in predict("memory", "copies")}
    n = memory.GPU_N  # 2**26 float32: a copy reads and writes 512 MiB
    assert by["torch copy"].values == pytest.approx((8 * n / H100, 8 * n / H200))
    assert by["torch copy"].values[0] == pytest.approx(2**29 / 3.35e12)  # 0.160 ms
    assert shown(by["torch copy"].values[0], "ms") == "0.160"
    # stride 8: every output's word in a 32-byte sector of its own, its store coalesced
    assert by["copy stride 8"].values[0] == pytest.approx((32 + 4) * n / 8 / H100)
    vector_add = {p.quantity: p for p in predict("elementwise", "bandwidth")}
    assert vector_add["vector_add_v2_grid_stride"].values[1] == pytest.approx(
        12 * elementwise.GPU_N / H200)
    ring = predict("allreduce", "busbw")[0]  # 256 MiB on 2 GPUs, 450 GB/s each way
    assert ring.rows == ("all_reduce 256 MiB x2",) and ring.field == "time_s"
    assert ring.values[0] == pytest.approx(2 * 1 / 2 * 2**28 / 450e9)
    bubble = {p.rows[0]: p for p in predict("pipeline", "bubble")}
    assert bubble["gpipe m=4"].values == (pytest.approx(3 / 7),) * 2  # (p-1)/(m+p-1), p = 4
    matmul = {p.quantity.format(**dict(p.fields)): p for p in predict("matmul", "gflops")}
    fp32_4096, fp16_4096 = matmul["every float32 kernel, n = 4,096"], \
        matmul["the float16 kernel, n = 4,096"]
    assert fp32_4096.values[0] == pytest.approx(2 * 4096**3 / 67e12)  # H100 SXM FP32 peak
    # the float16 Triton matmul on tensor cores: 989 dense FP16 TFLOP/s
    assert fp16_4096.values[0] == pytest.approx(2 * 4096**3 / 989e12)
    # torch's row and every variant's, each in the group of its format
    records = registry.variant_records("matmul")
    assert "torch n=4096" in fp32_4096.rows
    assert sorted(fp32_4096.rows[1:] + fp16_4096.rows) == sorted(
        f"matmul_{v} n=4096" for v in records)
    assert fp16_4096.rows == tuple(f"matmul_{v} n=4096" for v, r in records.items()
                                   if r.precision == "float16")
    attention_4096 = {p.rows[0]: p for p in predict("attention", "times")}
    half = attention_4096["attention_v4_triton_flash_float16 s=4096"]
    assert "FP16 peak" in half.model
    assert predict("launch", "costs")[1].values == (1000.0, 1000.0)  # one launch per tensor
    # Appendix E: Chapter 3's step launches 21 kernels; a 2**24-element chunk of 8 moves 12 B
    # an element
    assert predict("profiles", "launches")[0].values == (21.0, 21.0)
    assert predict("profiles", "kernels")[0].values[0] == pytest.approx(12 * 2**21 / H100)


def test_shown_and_expected_print_what_a_lab_prints():
    assert shown(2.4e-4, "ms") == "0.240" and shown(1000.0, "") == "1,000"
    assert shown(3.35e12, "GB/s") == "3,350" and shown(0.75, "") == "0.750"
    text = predictions.expected("elementwise", "bandwidth")
    assert text.splitlines()[0] == ("What the book's models predict on an H100 SXM (not a "
                                    "measurement):")
    assert ("  torch copy: 0.160 ms (bound: bytes moved / memory bandwidth; section "
            "ch01-simt)") in text.splitlines()
    assert "0.112 ms" in predictions.expected("elementwise", "bandwidth", "H200 SXM")
    assert "SAXPY of 16,777,216 elements in 8 chunks" in predictions.expected("streams")
    with pytest.raises(ValueError, match="view must be one of"):
        predict("elementwise", "copies")
    with pytest.raises(TypeError, match="view must be a NoneType"):
        predict("streams", "bandwidth")


def _measured_on(gpu: str, record: dict) -> dict:
    return record | {"machine": record["machine"] | {"gpu": gpu}}


def test_a_stored_run_shows_measured_predicted_and_their_ratio(tmp_path, fake_cuda_record):
    record = _measured_on("NVIDIA H100 80GB HBM3", fake_cuda_record())
    lines = gpudl_measured.box_markdown("elementwise", "bandwidth", record, tmp_path)
    text = "\n".join(lines)
    assert "**Measured against predicted** on the H100 SXM" in text
    predicted = 12 * elementwise.GPU_N / H100
    assert (f"| `vector_add_v2_grid_stride` | 0.0100\u00a0ms | {shown(predicted, 'ms')}\u00a0ms "
            f"| {1e-5 / predicted:.2f} | bound |") in text
    assert "Not yet measured" not in text
    # the ratio of a ratio: the parity row's time over the warp row's, against 2 paths
    divergence = gpudl_measured.box_markdown("elementwise", "divergence", record, tmp_path)
    assert ("| time of `divergence parity` over `divergence warp` | 2 | 2 | 1.00 | estimate |"
            in divergence)
    chinese = gpudl_measured.box_markdown("elementwise", "bandwidth", record, tmp_path,
                                          language="zh_CN")
    assert any(line.startswith("**测量值与预测值对照**") for line in chinese)


def test_a_stored_run_on_a_gpu_the_book_does_not_predict_says_so(tmp_path, fake_cuda_record):
    lines = gpudl_measured.box_markdown("elementwise", "bandwidth", fake_cuda_record(),
                                        tmp_path)
    assert ("No prediction for **Fake GPU 9000**: the book's models are evaluated for the "
            "H100 SXM and the H200 SXM only.") in lines
    assert ("| `torch copy` | 0.160\u00a0ms | 0.112\u00a0ms | *bound*: bytes moved / memory "
            "bandwidth ({ref}`ch01-simt`) |") in lines


def test_measured_value_reads_rows_ratios_p2p_rows_and_record_values():
    record = {"rows": [{"name": "a", "median_s": 2.0, "busbw_gbs": 400.0},
                       {"name": "b", "median_s": 4.0}],
              "p2p": [{"name": "send/recv 256 MiB", "gbps": 300.0}],
              "hierarchy": {"bandwidth": {"HBM": {"gbs": 3000.0}}}}
    one = Prediction("a", (1.0, 1.0), "ms", "m", "s", "bound", ("a", "b"))
    assert predictions.measured_value(one, record) == 2.0
    assert predictions.measured_value(one, record, "b") == 4.0
    bus = Prediction("a", (1.0, 1.0), "GB/s", "m", "s", "bound", ("a",), field="busbw_gbs")
    assert predictions.measured_value(bus, record) == 400e9
    ratio = Prediction("a", (1.0, 1.0), "", "m", "s", "estimate", ("a",), over="b")
    assert predictions.measured_value(ratio, record) == 0.5
    p2p = predict("allreduce", "p2p")[0]
    assert predictions.measured_value(p2p, record) == 300e9
    hbm = predict("memory", "hierarchy")[0]
    assert predictions.measured_value(hbm, record) == 3000e9
    assert predictions.measured_value(predict("memory", "hierarchy")[1], record) is None
    with pytest.raises(ValueError, match="row must be one of"):
        predictions.measured_value(one, record, "c")


def test_a_driver_s_name_maps_to_a_reference_gpu():
    assert predictions.reference_gpu("NVIDIA H200") == "H200 SXM"
    assert predictions.reference_gpu("NVIDIA H100 80GB HBM3") == "H100 SXM"
    assert predictions.reference_gpu("NVIDIA A100-SXM4-80GB") is None  # in SPECS, not predicted
    assert predictions.reference_gpu("Fake GPU 9000") is None


def test_the_published_list_names_each_source_and_hardware():
    lines = gpudl_predicted.published_list("attention", "times")
    assert lines[0].startswith("**Published** measurements")
    assert ("- FlashAttention-2 (FP16 or BF16), the best of its benchmark: **335 TFLOP/s**, "
            "reported by {cite}`dao2023flashattention2` on H100 SXM5.") in lines
    assert gpudl_predicted.published_list("elementwise", "divergence") == []
