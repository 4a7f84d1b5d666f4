"""Tensor cores from Numba: one warp-wide matrix multiply-accumulate, ``mma.sync`` m16n8k16.

Book section: Chapter 8, "Tensor cores" and "A warp-level mma from Numba".

A tensor core instruction is issued by a whole warp: ``mma.sync.aligned.m16n8k16.row.col.
f32.bf16.bf16.f32`` computes ``D = A B + C`` for a 16 x 16 bfloat16 ``A``, a 16 x 8 bfloat16
``B`` and 16 x 8 float32 ``C`` and ``D``, and each of the 32 lanes holds a fixed part of every
matrix in its registers, its **fragment** (PTX ISA, "Matrix Fragments for mma.m16n8k16").
With ``g = lane // 4`` and ``t = lane % 4``:

* ``A``: four 32-bit registers of two bf16 each (the lower ``k`` in the low half):
  ``A[g, 2t:2t+2]``, ``A[g+8, 2t:2t+2]``, ``A[g, 2t+8:2t+10]``, ``A[g+8, 2t+8:2t+10]``;
* ``B``: two registers, ``B[2t:2t+2, g]`` and ``B[2t+8:2t+10, g]``;
* ``C`` and ``D``: four floats, ``[g, 2t]``, ``[g, 2t+1]``, ``[g+8, 2t]``, ``[g+8, 2t+1]``.

A row-major bf16 ``A`` viewed as 32-bit words therefore gives lane ``(g, t)`` its registers
as words ``t`` and ``t + 4`` of rows ``g`` and ``g + 8``; ``B`` stored transposed, as ``(N,
K)``, gives them as words ``t`` and ``t + 4`` of row ``g`` (:func:`bf16_words` packs both).

numba-cuda has no API for it, so :func:`mma_bf16` is, on a GPU, an ``@intrinsic`` whose code
is that one line of inline PTX (llvmlite's ``InlineAsm``); it needs compute capability 8.0 or
later, which :func:`check_tensor_cores` checks. On the simulator it is a Python function: the
32 lanes meet at the warp rendezvous of :mod:`gpudl.backend`, each hands in its fragments,
every lane rebuilds ``A``, ``B`` and ``C`` from them by the layout above and returns its own
four values of ``D``. The tests hold both to :func:`fragments` and :func:`reference`.

Accuracy: on the simulator ``A B + C`` is computed in float64 and rounded once to float32.
Tensor cores multiply bf16 exactly but add with truncation, aligning the terms of one
instruction to the largest (Fasi et al., "Numerical behavior of NVIDIA tensor cores", 2021):
each term loses less than one unit in the last place of a 24-bit significand, so one
instruction errs by at most ``(16 + 2) eps32`` times the sum of the magnitudes of its 16
products and ``C`` (the last 2 for the final normalisation and margin). That is
:func:`error_bound`, per instruction.
"""

from __future__ import annotations

from typing import Any

from gpudl import backend

# isort: split
import numpy as np
from numba import cuda

from gpudl import registry
from gpudl.checks import (
    check_array,
    check_choice,
    check_equal,
    check_int,
)
from gpudl.kernels.arrays import EPS32, poisoned

__all__ = [
    "M", "N", "K", "PTX", "ERROR_ULPS",
    "bf16_round", "bf16_words", "fragments", "lanes", "reference", "error_bound",
    "mma_bf16", "check_tensor_cores", "warp_mma", "mma_tile",
]

M, N, K = 16, 8, 16
#: Units of eps32, times the sum of the magnitudes, that one instruction may err by.
ERROR_ULPS = K + 2
#: The PTX of the instruction; its operands are D0..D3, A0..A3, B0, B1 and C0..C3, and C
#: is tied to D's registers.
PTX = ("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
       "{$0,$1,$2,$3}, {$4,$5,$6,$7}, {$8,$9}, {$10,$11,$12,$13};")
_CONSTRAINTS = "=f,=f,=f,=f,r,r,r,r,r,r,0,1,2,3"


# ------------------------------------------------------------------------------------------
# bfloat16 on the host, and the fragment layout
# ------------------------------------------------------------------------------------------


def bf16_round(x: np.ndarray) -> np.ndarray:
    """``x`` rounded to bfloat16 (to nearest, ties to even, as torch does), as float32."""
    import torch

    check_array("x", x)
    return torch.from_numpy(np.ascontiguousarray(x, np.float32)).to(torch.bfloat16).float(
    ).numpy()


def bf16_words(x: np.ndarray, k_padded: int | None = None) -> np.ndarray:
    """A float32 ``(rows, k)`` array rounded to bf16 and packed two per 32-bit word along
    its rows (the lower column in the low half), zero-padded to ``k_padded`` columns (a
    multiple of 16; default: ``k`` rounded up): a ``(rows, k_padded // 2)`` uint32 array."""
    import torch

    x = np.asarray(check_array("x", x, 2), np.float32)
    rows, k = x.shape
    k_padded = -(-k // K) * K if k_padded is None else check_int("k_padded", k_padded, 0)
    if k_padded % K or k_padded < k:
        raise ValueError(f"k_padded must be a multiple of {K} and at least {k}, got {k_padded}")
    padded = np.zeros((rows, k_padded), np.float32)
    padded[:, :k] = x
    bits = torch.from_numpy(padded).to(torch.bfloat16).view(torch.int16).numpy()
    return bits.view(np.uint16).view(np.uint32).reshape(rows, k_padded // 2)


def _unpack(words: np.ndarray) -> np.ndarray:
    """uint32 words -> pairs of bf16 values as float32 (low half first), on the last axis."""
    words = np.asarray(words, np.uint32)
    halves = np.stack([words & 0xFFFF, words >> 16], axis=-1).astype(np.uint32) << 16
    return halves.view(np.float32).reshape(*words.shape[:-1], 2 * words.shape[-1])


def fragments(a: np.ndarray, b: np.ndarray, c: np.ndarray) -> list[tuple]:
    """Each lane's registers for ``a`` (16, 16) and ``b`` (16, 8), bf16 values as float32,
    and ``c`` (16, 8) float32: ``[(a_words (4,), b_words (2,), c (4,)) for lane 0..31]``."""
    _check_tile(a, b, c)
    a_w, b_w = bf16_words(a), bf16_words(np.asarray(b).T)  # (16, 8) and (8, 8) words
    out = []
    for lane in range(32):
        g, t = lane // 4, lane % 4
        out.append((np.array([a_w[g, t], a_w[g + 8, t], a_w[g, t + 4], a_w[g + 8, t + 4]]),
                    np.array([b_w[g, t], b_w[g, t + 4]]),
                    np.array([c[g, 2 * t], c[g, 2 * t + 1], c[g + 8, 2 * t],
                              c[g + 8, 2 * t + 1]], np.float32)))
    return out


def lanes(matrix: str) -> np.ndarray:
    """The lane that holds each element of ``matrix`` ("a", "b" or "c"), read off
    :func:`fragments` by handing it matrices whose values number their elements."""
    shapes = {"a": (M, K), "b": (K, N), "c": (M, N)}
    check_choice("matrix", matrix, shapes)
    numbered = {name: np.arange(np.prod(shape), dtype=np.float32).reshape(shape)
                for name, shape in shapes.items()}  # below 256: exact in bf16
    owner = np.full(shapes[matrix], -1)
    for lane, (a_w, b_w, c_v) in enumerate(fragments(numbered["a"], numbered["b"],
                                                     numbered["c"])):
        held = {"a": _unpack(a_w), "b": _unpack(b_w), "c": c_v}[matrix]
        owner.flat[held.astype(int)] = lane
    return owner


def _check_tile(a: np.ndarray, b: np.ndarray, c: np.ndarray) -> None:
    """One instruction's operands: real arrays ``a`` (16, 16), ``b`` (16, 8), ``c`` (16, 8)."""
    for name, x, shape in (("a", a, (M, K)), ("b", b, (K, N)), ("c", c, (M, N))):
        check_equal(f"{name}.shape", check_array(name, x).shape, "the instruction's", shape)


def _assemble(registers: dict[int, tuple]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The inverse of :func:`fragments`: ``A``, ``B`` (as float64) and ``C`` from all 32
    lanes' registers."""
    a, b, c = np.zeros((M, K)), np.zeros((K, N)), np.zeros((M, N))
    for lane, (a_w, b_w, c_v) in registers.items():
        g, t = lane // 4, lane % 4
        a_v, b_v = _unpack(np.asarray(a_w)), _unpack(np.asarray(b_w))
        a[g, 2 * t:2 * t + 2], a[g + 8, 2 * t:2 * t + 2] = a_v[0:2], a_v[2:4]
        a[g, 2 * t + 8:2 * t + 10], a[g + 8, 2 * t + 8:2 * t + 10] = a_v[4:6], a_v[6:8]
        b[2 * t:2 * t + 2, g], b[2 * t + 8:2 * t + 10, g] = b_v[0:2], b_v[2:4]
        c[g, 2 * t:2 * t + 2], c[g + 8, 2 * t:2 * t + 2] = c_v[0:2], c_v[2:4]
    return a, b, c


def reference(a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
    """``bf16(a) @ bf16(b) + c`` in float64: what one instruction computes, exactly."""
    _check_tile(a, b, c)
    return (bf16_round(a).astype(np.float64) @ bf16_round(b).astype(np.float64)
            + np.asarray(c, np.float64))


def error_bound(a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
    """``(K + 2) eps32 (|bf16(a)| @ |bf16(b)| + |c|)``: how far one instruction's float32
    ``D`` may be from :func:`reference` (derivation in the module docstring)."""
    _check_tile(a, b, c)
    magnitude = (np.abs(bf16_round(a)).astype(np.float64) @ np.abs(bf16_round(b))
                 + np.abs(np.asarray(c, np.float64)))
    return ERROR_ULPS * EPS32 * magnitude


# ------------------------------------------------------------------------------------------
# The instruction: inline PTX on a GPU, a warp rendezvous on the simulator
# ------------------------------------------------------------------------------------------


def _simulated_mma(a0, a1, a2, a3, b0, b1, c0, c1, c2, c3):
    """The simulator's ``mma_bf16``: every lane of the warp must call it (as on a GPU)."""
    from gpudl.simulator import WarpDivergenceError, rendezvous

    rdv, lane = rendezvous()
    registers = rdv.exchange(0xFFFFFFFF, lane,
                             ((a0, a1, a2, a3), (b0, b1), (c0, c1, c2, c3)))
    if len(registers) != 32:
        raise WarpDivergenceError(
            f"mma_bf16 needs all 32 lanes of a warp, got {len(registers)}: launch whole warps")
    a, b, c = _assemble(registers)
    d = (a @ b + c).astype(np.float32)
    g, t = lane // 4, lane % 4
    return d[g, 2 * t], d[g, 2 * t + 1], d[g + 8, 2 * t], d[g + 8, 2 * t + 1]


def _compiled_mma() -> Any:
    from llvmlite import ir
    from numba.cuda import types
    from numba.cuda.extending import intrinsic

    # mma_bf16(a0, a1, a2, a3, b0, b1, c0, c1, c2, c3) -> (d0, d1, d2, d3): the inline PTX
    # above, with uint32 registers of two bf16 each for A and B and float32 for C and D.
    @intrinsic
    def mma_bf16(typingctx, a0, a1, a2, a3, b0, b1, c0, c1, c2, c3):
        words, floats = (a0, a1, a2, a3, b0, b1), (c0, c1, c2, c3)
        if not (all(x == types.uint32 for x in words)
                and all(x == types.float32 for x in floats)):
            return None  # a typing error: A and B must be uint32 words, C float32
        sig = types.UniTuple(types.float32, 4)(*words, *floats)

        def codegen(context, builder, signature, args):
            f32, i32 = ir.FloatType(), ir.IntType(32)
            fnty = ir.FunctionType(ir.LiteralStructType([f32] * 4), [i32] * 6 + [f32] * 4)
            asm = ir.InlineAsm(fnty, PTX, _CONSTRAINTS, side_effect=True)
            result = builder.call(asm, args)
            return context.make_tuple(builder, signature.return_type,
                                      [builder.extract_value(result, i) for i in range(4)])

        return sig, codegen

    return mma_bf16


#: The warp-wide m16n8k16 bf16 mma: ``(d0, d1, d2, d3) = mma_bf16(a0, a1, a2, a3, b0, b1,
#: c0, c1, c2, c3)`` in a kernel, every lane of the warp calling it with its fragments.
mma_bf16 = _simulated_mma if backend.is_simulator() else _compiled_mma()


def check_tensor_cores() -> None:
    """Raise a ``RuntimeError`` on a GPU older than compute capability 8.0 (Ampere), whose
    tensor cores have no bf16 ``mma.sync``. The simulator emulates it and always passes."""
    if backend.is_simulator():
        return
    cc = tuple(cuda.get_current_device().compute_capability)
    if cc < (8, 0):
        raise RuntimeError(f"bf16 mma.sync needs compute capability 8.0 or later (Ampere); "
                           f"this GPU has {cc[0]}.{cc[1]}")


# ------------------------------------------------------------------------------------------
# One instruction, launched: the test of the layout on either backend
# ------------------------------------------------------------------------------------------


# warp_mma: one warp, one instruction. Lane (g, t) loads its registers from A's and B's words
# and C by the layout of the module docstring, and stores its four values of D in the same
# places of C's layout.
@registry.kernel("warp_mma",
                 "void(uint32[:, ::1], uint32[:, ::1], float32[:, ::1], float32[:, ::1])",
                 reference="gpudl.kernels.mma.reference")
@cuda.jit
def warp_mma(a_words, b_words, c, d):
    lane = cuda.threadIdx.x
    g, t = lane // 4, lane % 4
    d0, d1, d2, d3 = mma_bf16(a_words[g, t], a_words[g + 8, t], a_words[g, t + 4],
                              a_words[g + 8, t + 4], b_words[g, t], b_words[g, t + 4],
                              c[g, 2 * t], c[g, 2 * t + 1], c[g + 8, 2 * t], c[g + 8, 2 * t + 1])
    d[g, 2 * t], d[g, 2 * t + 1] = d0, d1
    d[g + 8, 2 * t], d[g + 8, 2 * t + 1] = d2, d3


def mma_tile(a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
    """``D = bf16(a) @ bf16(b) + c`` for float32 ``a`` (16, 16), ``b`` (16, 8), ``c`` (16, 8),
    by one launch of ``warp_mma`` (one warp, one instruction)."""
    check_tensor_cores()
    for name, x, shape in (("a", a, (M, K)), ("b", b, (K, N)), ("c", c, (M, N))):
        if not isinstance(x, np.ndarray):
            raise TypeError(f"{name} must be a NumPy array, got {type(x).__name__}")
        if x.dtype != np.float32:
            raise TypeError(f"{name} must have dtype float32, got {x.dtype}")
        if x.shape != shape:
            raise ValueError(f"{name} must have shape {shape}, got {x.shape}")
    d = poisoned((M, N))
    warp_mma[1, 32](cuda.to_device(bf16_words(a)), cuda.to_device(bf16_words(b.T)),
                    cuda.to_device(c), d)
    return d.copy_to_host()
