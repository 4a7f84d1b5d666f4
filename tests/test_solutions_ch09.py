"""Chapter 9's exercises: int4 packing round-trips at odd widths and its GEMV stays within the
int8 kernel's bound (with the int4 values); Llama 2 70B's cache with and without grouped-query
attention; the context past which decoding cannot be compute-bound; the price of a token at
batch 1 and 64."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpudl.estimate import MODELS, critical_batch
from gpudl.kernels import quant
from gpudl.solutions import ch09


@settings(max_examples=20, deadline=None, database=None)
@given(rows=st.integers(1, 5), cols=st.integers(1, 19), seed=st.integers(0, 2**32 - 1))
def test_int4_packing_round_trips_at_odd_widths(rows, cols, seed):
    q = np.random.default_rng(seed).integers(-8, 8, (rows, cols)).astype(np.int8)
    packed = ch09.pack_int4(q)
    assert packed.dtype == np.uint8 and packed.shape == (rows, -(-cols // 2))
    np.testing.assert_array_equal(ch09.unpack_int4(packed, cols), q)


def test_int4_packing_by_hand():
    packed = ch09.pack_int4(np.array([[1, -1, -8]], np.int8))
    assert packed.tolist() == [[0xF1, 0x08]]  # -1 is 0xF in the high nibble; -8 is 0x8


@pytest.mark.parametrize("shape", [(3, 13), (2, 1), (4, 64)])
def test_the_int4_gemv_within_the_bound(shape):
    rng = np.random.default_rng(shape[1])
    w = rng.standard_normal(shape).astype(np.float32)
    x = rng.standard_normal((2, shape[1])).astype(np.float32)
    q, scale = ch09.quantize_int4(w)
    assert np.abs(q).max() == 7
    assert (np.abs(q * scale[:, None].astype(np.float64) - w) <= scale[:, None] / 2 * 1.000001
            ).all()
    y = ch09.gemv_int4(x, ch09.pack_int4(q), scale)
    assert (np.abs(y - quant.reference(x, q, scale)) <= quant.error_bound(x, q, scale)).all()


def test_the_int4_gemv_signs_its_nibbles():
    q = np.array([[-1, -7, 3]], np.int8)
    y = ch09.gemv_int4(np.ones((1, 3), np.float32), ch09.pack_int4(q), np.ones(1, np.float32))
    assert y[0, 0] == -5  # read unsigned, the nibbles would be 15, 9 and 3: 27


def test_bad_int4_input():
    with pytest.raises(ValueError, match="int4 values from -8 to 7"):
        ch09.pack_int4(np.array([[9]], np.int8))
    with pytest.raises(ValueError, match="3 values take 2 bytes a row, packed has 1"):
        ch09.unpack_int4(np.zeros((1, 1), np.uint8), 3)
    with pytest.raises(ValueError, match=r"packed must be \(out, ceil\(in / 2\)\)"):
        ch09.gemv_int4(np.ones((1, 3), np.float32), np.zeros((1, 1), np.uint8),
                       np.ones(1, np.float32))


def test_exercise_2_grouped_query_attention_saves_eight_times():
    saving = ch09.gqa_saving(4096)
    assert saving["gqa_per_token"] == 320 * 2**10 and saving["mha_per_token"] == 2.5 * 2**20
    assert saving["saving"] == 8 and saving["mha_total"] == 10 * 2**30
    assert saving["gqa_total"] == 1.25 * 2**30


def test_exercise_3_the_longest_compute_bound_context():
    kv = MODELS["Llama 2 7B"].kv_bytes_per_token()
    tokens = ch09.longest_compute_bound_context(7e9, kv, 989e12, 3.35e12)
    assert round(tokens, 1) == 90.4
    # the critical batch agrees: compute-bound just below, never just above
    assert critical_batch(989e12, 3.35e12, 7e9, 0.99 * tokens * kv) is not None
    assert critical_batch(989e12, 3.35e12, 7e9, 1.01 * tokens * kv) is None


def test_exercise_4_batching_divides_the_price_of_a_token():
    by_batch = ch09.tokens_per_price_by_batch((1, 64), context=512, price=2.0)
    assert round(by_batch[64] / by_batch[1], 1) == 29.3
    assert by_batch[1] == pytest.approx(3.35e12 / (14e9 + 512 * 2**19) * 3600 / 2.0)
