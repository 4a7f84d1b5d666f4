"""Chapter 8's exercises: the backward pass of attention as kernels (against torch's autograd
in float64 within the derived bound), the lane that holds an element of an mma fragment, the
size at which a bf16 product can reach the ridge point, the bytes fused attention saves."""

import math

import numpy as np
import pytest
import torch

from gpudl import backend  # noqa: F401  (first: chooses GPU or simulator)

# isort: split
from gpudl.kernels import attention as attention_kernels
from gpudl.kernels import mma
from gpudl.solutions import ch08


def torch_grads(q, k, v, do, causal):
    tensors = [torch.tensor(x, dtype=torch.float64, requires_grad=True) for x in (q, k, v)]
    out = torch.nn.functional.scaled_dot_product_attention(*tensors, is_causal=causal)
    out.backward(torch.tensor(do, dtype=torch.float64))
    return [t.grad.numpy() for t in tensors]


def inputs(heads, s, d, seed):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal((heads, s, d)).astype(np.float32) for _ in range(4)]


@pytest.mark.parametrize(("heads", "s", "d", "causal"), [(2, 19, 5, False), (1, 20, 17, True)])
def test_exercise_1_backward_matches_autograd_within_the_bound(heads, s, d, causal):
    q, k, v, do = inputs(heads, s, d, seed=s)
    o, lse = attention_kernels.forward(q, k, v, causal)
    got = ch08.attention_backward(q, k, v, o, do, lse, causal)
    bounds = ch08.backward_error_bound(q, k, v, o, do, causal)
    for name, g, ref, bound in zip("qkv", got, torch_grads(q, k, v, do, causal), bounds,
                                   strict=True):
        assert g.dtype == np.float32 and not np.isnan(g).any(), f"d{name}"
        assert (np.abs(g - ref) <= bound).all(), f"d{name} outside its bound"
    if causal:  # the last key is seen by the last query only: other rows' dO do not matter
        other = do.copy()
        other[:, :-1] = 7.0
        np.testing.assert_array_equal(
            ch08.attention_backward(q, k, v, o, other, lse, causal)[2][:, -1], got[2][:, -1])


def test_exercise_1_the_bound_catches_a_wrong_statistic():
    q, k, v, do = inputs(1, 18, 4, seed=1)
    o, lse = attention_kernels.forward(q, k, v)
    got = ch08.attention_backward(q, k, v, o, do, lse + np.float32(0.01))  # P off by 1%
    ref, bound = torch_grads(q, k, v, do, False)[2], ch08.backward_error_bound(q, k, v, o, do)[2]
    assert not (np.abs(got[2] - ref) <= bound).all()


def test_exercise_1_bad_input():
    q = np.ones((1, 4, 3), np.float32)
    lse = np.zeros((1, 4), np.float32)
    with pytest.raises(ValueError, match=r"lse must have shape \(1, 4\), got \(1, 3\)"):
        ch08.attention_backward(q, q, q, q, q, lse[:, :3].copy())
    with pytest.raises(TypeError, match="do must have dtype float32"):
        ch08.attention_backward(q, q, q, q, q.astype(np.float64), lse)
    with pytest.raises(TypeError, match="causal must be a bool"):
        ch08.attention_backward(q, q, q, q, q, lse, causal="yes")


def test_exercise_2_lane_of_every_element_matches_the_fragments():
    # values 0..255 are exact in bf16, so each one names its element
    a = np.arange(256, dtype=np.float32).reshape(16, 16)
    b = np.arange(128, dtype=np.float32).reshape(16, 8)
    c = np.arange(128, dtype=np.float32).reshape(16, 8)
    for lane, (a_w, b_w, c_v) in enumerate(mma.fragments(a, b, c)):
        for reg in range(4):
            for half in range(2):
                value = int(mma._unpack(a_w)[2 * reg + half])
                assert ch08.lane_of("a", value // 16, value % 16) == (lane, reg, half)
            assert ch08.lane_of("c", int(c_v[reg]) // 8, int(c_v[reg]) % 8) == (lane, reg, 0)
        for reg in range(2):
            for half in range(2):
                value = int(mma._unpack(b_w)[2 * reg + half])
                assert ch08.lane_of("b", value // 8, value % 8) == (lane, reg, half)
    with pytest.raises(ValueError, match="outside b's 16 x 8"):
        ch08.lane_of("b", 3, 8)
    with pytest.raises(ValueError, match="matrix must be one of"):
        ch08.lane_of("d", 0, 0)


def test_exercise_3_bf16_crossing():
    # H100 SXM: 989e12 / 3.35e12 = 295.2 flop/byte; n / 3 reaches it at n = 886
    n = ch08.bf16_matmul_crossing("H100 SXM")
    assert n == 886
    ridge = 989e12 / 3.35e12
    assert n / 3 >= ridge > (n - 1) / 3
    assert ch08.bf16_matmul_crossing("A100 80GB SXM") == math.ceil(3 * 312 / 2.039)


def test_exercise_4_bytes_saved_by_hand():
    # per head, in float32 values, T = 256: v1 - v2 = (3 T s d + 9 s^2 + s d + s)
    #                                               - (s d + 2 T s d + s d + s)
    s, d, heads = 4096, 64, 16
    saved, ratio = ch08.bytes_saved(heads, s, d)
    assert saved == 4 * heads * (256 * s * d + 9 * s * s - s * d)
    assert ratio == pytest.approx(1 + saved / (4 * heads * (2 * s * d + 512 * s * d + s)))
