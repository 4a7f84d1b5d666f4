"""gpudl.bench.experts: the grouped expert products and their loop, checked against each other
before they are timed, counted in useful flops, stored by the matmul topic."""

import pytest
import torch

from gpudl.bench import experts as bench_experts


def test_the_rows_count_the_useful_flops_and_the_padding():
    loop, grouped = bench_experts.grouped_experts()
    assert (loop["name"], grouped["name"]) == ("experts loop", "experts grouped")
    config = bench_experts.EXPERTS
    for r in (loop, grouped):
        assert r["group"] == "experts" and r["rows"] == loop["rows"]
        assert r["flops"] == 4 * r["rows"] * config.hidden * config.ffn
        # the padded buffers hold every kept row, and the drops keep it under top_k x tokens
        assert r["rows"] <= r["padded_rows"] and r["rows"] <= config.top_k * r["tokens"]


def test_a_grouped_result_that_differs_from_the_loop_is_not_timed(monkeypatch):
    monkeypatch.setattr(bench_experts, "experts_grouped", lambda rows, *args: torch.zeros_like(
        rows))
    with pytest.raises(RuntimeError, match="the grouped experts differ from the loop by"):
        bench_experts.grouped_experts()
