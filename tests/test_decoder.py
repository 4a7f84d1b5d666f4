"""gpudl.models.decoder, gpudl.models.kernel_decoder and gpudl.models.graphs: the tiny
decoder generates the same tokens on the book's kernels as in PyTorch on a fixed seed (its
logits within float32 rounding of torch's at every step, far closer than the margin of each
choice); one step's launches and bytes are counted on the CPU; the cache past the positions
written is never read; bad input; on the simulator graphs are refused, on a GPU a captured
step replays token for token."""

import numpy as np
import pytest
import torch

from gpudl import backend
from gpudl.kernels import decode
from gpudl.models import decoder as dec
from gpudl.models import graphs, kernel_decoder

pytestmark = pytest.mark.usefixtures("one_torch_thread")

PROMPT, NEW = [3, 17, 5], 5


@pytest.fixture(scope="module")
def one_torch_thread():
    """The tiny model's tensors are a few dozen numbers: one thread spares each operation
    the wake-up of torch's thread pool (tens of milliseconds on a loaded machine)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def model():
    return dec.make_decoder(seed=0)


@pytest.fixture(scope="module")
def torch_run(model):
    return dec.generate_torch(model, PROMPT, NEW)


def test_the_kernels_generate_torchs_tokens(model, torch_run):
    tokens, logits = kernel_decoder.KernelDecoder(model).generate(PROMPT, NEW)
    expected, expected_logits = torch_run
    assert tokens == expected and len(set(tokens)) > 1
    for got, want in zip(logits, expected_logits, strict=True):
        gap = np.abs(got - want).max()
        top2 = np.sort(want)[-2:]
        # float32 rounding apart, and each choice far from a tie: the equality is no luck
        assert gap < 1e-5 * np.abs(want).max() + 1e-6 and top2[1] - top2[0] > 100 * gap


def test_the_decoder_is_chapter_6s_block_made_causal(model):
    # a later token does not change an earlier one's logits; a prefill equals its steps
    cache = model.new_cache(1)
    with torch.no_grad():
        whole = model(torch.tensor([[3, 17, 5, 9]]), cache)
        stepped = torch.cat([model(torch.tensor([[t]]), c, p) for c in [model.new_cache(1)]
                             for p, t in enumerate([3, 17, 5, 9])], dim=1)
        changed = model(torch.tensor([[3, 17, 5, 11]]), model.new_cache(1))
    torch.testing.assert_close(whole, stepped, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(whole[:, :3], changed[:, :3])
    assert type(model.blocks[0].mlp).__name__ == "FeedForward"  # Chapter 6's, reused


def test_launches_per_step_are_counted_on_the_cpu(model):
    config = model.config
    for attention, per_attention in (("v1_one_block_per_head", 1), ("v2_split_kv", 2)):
        counted = kernel_decoder.launches_per_step(kernel_decoder.KernelDecoder(model, attention))
        per_layer = 3 + 1 + per_attention + 1 + 1 + 2 + 1  # q, k, v; append; attention;
        assert sum(counted.values()) == 3 + config.layers * per_layer  # out; norm; ffn; norm
        assert counted["v1_linear"] == 6 * config.layers + 1


@pytest.mark.simulator_only
def test_the_bytes_of_one_step_are_the_weights_and_the_cache(model):
    # the step at position 3: 4 tokens attended
    counted = kernel_decoder.step_bytes_after(model, PROMPT)
    c = model.config
    linear = sum(p.numel() for n, p in model.named_parameters() if "norm" not in n
                 and "emb" not in n)
    norms = sum(p.numel() for n, p in model.named_parameters() if "norm" in n)
    # each linear weight and bias once, LayerNorm's gamma and beta once per column, one row
    # of each embedding
    assert counted["weights"] == 4 * (linear + norms + 2 * c.hidden)
    reads = c.layers * 2 * c.heads * 4 * c.head_dim  # k and v, every query head, 4 positions
    writes = c.layers * 2 * c.kv_heads * c.head_dim  # the new token's key and value
    assert counted["kv cache"] == 4 * (reads + writes)


def test_positions_not_written_are_never_read(model, torch_run):
    # the caches start poisoned (NaN): a read past what the steps wrote would give NaN
    decoder = kernel_decoder.KernelDecoder(model, "v2_split_kv")
    tokens, logits = decoder.generate(PROMPT, NEW)
    assert tokens == torch_run[0] and not np.isnan(np.array(logits)).any()
    keys = decoder.blocks[0][2][0].copy_to_host()[0]  # (kv_heads, max_len, head_dim)
    written = len(PROMPT) + NEW - 1  # the last token chosen is never fed back
    assert not np.isnan(keys[:, :written]).any() and np.isnan(keys[:, written:]).all()


@pytest.mark.parametrize(("prompt", "new", "error", "match"), [
    ([], 2, ValueError, "prompt must hold at least 1"),
    ("abc", 2, TypeError, "prompt must be a sequence of ints"),
    ([1, 40], 2, ValueError, r"prompt\[1\] must be a token id below vocab = 40"),
    ([1, -1], 2, ValueError, r"prompt\[1\] must be >= 0"),
    ([1, 2], 0, ValueError, "new_tokens must be >= 1"),
    ([1] * 10, 8, ValueError, "need 17 positions; max_len is 16"),
])
def test_bad_prompts_get_a_clear_error(model, prompt, new, error, match):
    with pytest.raises(error, match=match):
        dec.generate_torch(model, prompt, new)
    with pytest.raises(error, match=match):
        kernel_decoder.KernelDecoder(model).generate(prompt, new)


def test_bad_configurations_get_a_clear_error(model):
    with pytest.raises(ValueError, match=r"heads \(4\) must be a multiple of kv_heads \(3\)"):
        dec.DecoderConfig(hidden=16, heads=4, kv_heads=3)
    with pytest.raises(ValueError, match="hidden .* must be a multiple of heads"):
        dec.DecoderConfig(hidden=10, heads=4, kv_heads=1)
    with pytest.raises(ValueError, match="attention must be one of"):
        kernel_decoder.KernelDecoder(model, "v9")


@pytest.mark.simulator_only
def test_the_simulator_has_no_graphs(model):
    with pytest.raises(RuntimeError, match="CUDA graphs need a GPU"):
        graphs.capture(kernel_decoder.KernelDecoder(model).step)


@pytest.mark.gpu
@pytest.mark.parametrize("attention", list(decode.VARIANTS))
def test_a_captured_step_replays_token_for_token_on_the_gpu(model, torch_run, attention):
    assert backend.name() == "cuda"
    decoder = kernel_decoder.KernelDecoder(model, attention)
    eager, eager_logits = decoder.generate(PROMPT, NEW)
    graph = graphs.capture(decoder.step)
    replayed, replayed_logits = decoder.generate(PROMPT, NEW, run_step=graph.replay)
    assert replayed == eager == torch_run[0]
    np.testing.assert_array_equal(np.array(replayed_logits), np.array(eager_logits))
