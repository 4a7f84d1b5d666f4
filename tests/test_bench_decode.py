"""gpudl.bench.decode (Chapter 9): its rows and bars on the simulator (tiny sizes, every kernel
checked first, no graph rows, every bar without a ratio); on a GPU, the chapter's speed bars."""

import pytest

import gpudl  # noqa: F401  (first: chooses GPU or simulator before numba is imported)

# isort: split
from gpudl.bench import decode as decode_bench
from gpudl.bench import load_or_run
from gpudl.kernels import decode


@pytest.mark.simulator_only
def test_decode_rows_and_bars_on_the_simulator():
    body = decode_bench.run(s=33, heads=1, d=3, n=5)
    rows = {r["name"]: r for r in body["rows"]}
    assert set(rows) == {*(f"decode_{v} s=33" for v in decode.VARIANTS),
                         "torch copy s=33", "quant_v1_dequantize_then_multiply n=5",
                         "quant_v2_dequantize_in_registers n=5"}
    # bytes: the cache read once (keys and values, 33 x 3 floats each) plus q and o
    for variant in decode.VARIANTS:
        assert rows[f"decode_{variant} s=33"]["bytes"] == 4 * (2 * 33 * 3 + 2 * 3)
    assert rows["quant_v1_dequantize_then_multiply n=5"]["bytes"] > rows[
        "quant_v2_dequantize_in_registers n=5"]["bytes"]
    assert [b["name"] for b in body["bars"]] == [b["name"] for b in decode_bench.BARS]
    assert all(b["ratio"] is None and b["verdict"] is None for b in body["bars"])


@pytest.mark.gpu
def test_decode_bars_hold_on_the_gpu():
    stored = load_or_run("decode")
    names = {r["name"] for r in stored["rows"]}
    assert {"eager launches", "graph replay", "tiny decoder step graph"} <= names
    assert all(b["verdict"] for b in stored["bars"]), stored["bars"]
