"""Chapter 6's exercises: BERT-base's parameters and training memory, the micro-batches a
bubble target needs and the activations each schedule holds, and each strategy's traffic per
step (tensor parallelism's against the bytes a run actually all-reduces)."""

import pytest
import torch

from gpudl.estimate import bubble_fraction
from gpudl.models import BERT_BASE, encoder_batch
from gpudl.parallel.spawn import run_under_torchrun
from gpudl.parallel.tensor import TENSOR_CONFIG, TensorParallelRun, tensor_parallel_worker
from gpudl.solutions import ch06


def test_bert_base_has_the_published_110m_parameters():
    parts = ch06.bert_base_parameters()
    h, ffn = 768, 3072
    layer = 4 * (h * h + h) + 2 * h * ffn + ffn + h + 4 * h  # attention, MLP, 2 LayerNorms
    assert parts["encoder"] == 12 * layer
    assert parts["embeddings"] == (30522 + 512 + 2) * h + 2 * h
    assert parts["total"] == sum(v for k, v in parts.items() if k != "total")
    # Devlin et al. (2019) give "110M"; the count is exact here
    assert parts["total"] == 109_482_240
    assert round(parts["total"] / 1e6, -1) == 110


def test_bert_base_trains_on_one_80_gb_gpu():
    memory = ch06.bert_base_training_memory(batch=32, seq=512)
    assert memory["model_state"] == 16 * 109_482_240  # mixed-precision Adam
    s, b, h, a = 512, 32, 768, 12
    assert memory["activations"] == 12 * s * b * h * (34 + 5 * a * s / h)
    assert memory["total"] < 80e9 / 5  # under a fifth of one H100's or A100's memory


@pytest.mark.parametrize("stages", [1, 2, 4, 8])
@pytest.mark.parametrize("target", [0.5, 0.25, 0.2, 0.1, 0.05])
def test_min_microbatches_is_the_smallest_that_meets_the_target(stages, target):
    m = ch06.min_microbatches(stages, target)
    assert bubble_fraction(stages, m) <= target
    assert m == 1 or bubble_fraction(stages, m - 1) > target
    brute = next(k for k in range(1, 10_000) if bubble_fraction(stages, k) <= target)
    assert m == brute


def test_min_microbatches_for_four_stages():
    assert ch06.min_microbatches(4, 0.1) == 27  # 3 (0.9) / 0.1
    assert ch06.min_microbatches(4, 0.2) == 12  # the GPipe paper's m >= 4p, near enough
    with pytest.raises(ValueError, match="max_idle"):
        ch06.min_microbatches(4, 0.0)


def test_1f1b_holds_p_minus_s_micro_batches_gpipe_all_of_them():
    assert ch06.peak_activations("gpipe", 4, 27) == [27] * 4
    assert ch06.peak_activations("1f1b", 4, 27) == [4, 3, 2, 1]
    assert ch06.peak_activations("1f1b", 4, 2) == [2, 2, 2, 1]


def test_tensor_parallel_traffic_is_what_a_run_all_reduces():
    """A run on a group of one (this process) still calls every all-reduce, with the same
    tensors as on any number of ranks: its byte count is the formula's input."""
    run = TensorParallelRun("hand", fused=False, dtype=torch.float64)
    (result,) = run_under_torchrun(tensor_parallel_worker, [run])
    counted = result["all_reduces"][0]["bytes"]
    for ways in (2, 4, 8):
        traffic = ch06.step_traffic(TENSOR_CONFIG, run.batch, 1000, ways, element_bytes=8)
        assert traffic["tensor"] == pytest.approx(2 * (ways - 1) / ways * counted, rel=1e-12)
        x, _ = encoder_batch(TENSOR_CONFIG, run.batch)
        assert traffic["pipeline"] == 2 * x.numel() * 8


def test_bert_base_traffic_on_four_gpus():
    traffic = ch06.step_traffic(BERT_BASE, 32, 109_482_240, 4)
    assert traffic["data"] == 1.5 * 2 * 109_482_240
    assert traffic["tensor"] == 48 * 1.5 * 32 * 512 * 768 * 2
    assert traffic["tensor"] > 5 * traffic["data"] > 5 * traffic["pipeline"]
