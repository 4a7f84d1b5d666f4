"""gpudl.kernels.reduction: every variant against the float64 sum within its derived error
bound, the multi-pass logic, poisoned partials, NaN and inf, bad input, and (on a GPU) the
stored memory benchmark's bandwidth goals against a copy and torch.sum."""

import math

import numpy as np
import pytest
from conftest import EPS32
from hypothesis import example, given, settings
from hypothesis import strategies as st

from gpudl import backend  # first: chooses GPU or simulator before numba is imported

# isort: split
from numba import cuda

from gpudl.bench import find_bar, load_or_run
from gpudl.kernels import grid, reduction, reduction_error
from gpudl.kernels.grid import resident_blocks

TPB = reduction.THREADS_PER_BLOCK
PRIMES = [p for p in range(2, 3001) if all(p % d for d in range(2, math.isqrt(p) + 1))]
EDGE_SIZES = [0, 1, 31, 33, 255, 257, 1000, 2999]  # 2999 is prime
KINDS = ("normal", "positive", "wide")




def make_data(n: int, seed: int, kind: str = "normal") -> np.ndarray:
    rng = np.random.default_rng(seed)
    if kind == "normal":  # cancellation: |sum| much smaller than sum(|x|)
        x = 10.0 ** rng.integers(-3, 4) * rng.standard_normal(n)
    elif kind == "positive":  # no cancellation: the worst case for rounding error
        x = rng.uniform(0.5, 1.5, n)
    else:  # magnitudes spread over 12 decades, mixed signs
        x = rng.choice([-1, 1], n) * 10.0 ** rng.uniform(-6, 6, n)
    return x.astype(np.float32)


def assert_within_bound(got: float, x: np.ndarray, variant: str) -> None:
    """|got - exact| <= depth * eps32 * sum(|x|), NaN and inf as in NumPy.

    Each element goes through at most depth = addition_depth(n, variant) float32 additions,
    each with a relative rounding error of at most u = eps32 / 2, so the float32 sum is off
    by at most gamma(depth) * sum(|x|) with gamma(k) = k u / (1 - k u) <= 2 k u = k eps32
    while k u <= 1/2, i.e. depth <= 2**23 (Higham 2002, section 4.2). The slack between
    k u and k eps32 also covers the float64 reference's own rounding (2**-53 |sum|).
    depth <= n for every variant, so this is never looser than n * eps32 * sum(|x|), and
    for the trees it is 8 per launch.
    """
    exact = reduction.reference_sum(x)
    if math.isnan(exact):
        assert math.isnan(got), f"{variant}: expected NaN, got {got}"
    elif math.isinf(exact):
        assert got == exact, f"{variant}: expected {exact}, got {got}"
    else:
        depth = reduction_error.addition_depth(x.size, variant) if x.size else 0
        bound = depth * EPS32 * math.fsum(np.abs(x.astype(np.float64)))
        assert abs(got - exact) <= bound, (
            f"{variant}, n={x.size}: got {got!r}, exact {exact!r}, "
            f"error {abs(got - exact):.3g} > bound {bound:.3g} (depth {depth})"
        )


# ------------------------------------------------------------------------------------------
# Correctness against the float64 reference
# ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("variant", list(reduction.VARIANTS))
@settings(max_examples=1, deadline=None, database=None)
@given(
    n=st.sampled_from(PRIMES),
    seed=st.integers(0, 2**32 - 1),
    kind=st.sampled_from(KINDS),
)
@example(n=0, seed=0, kind="normal")
@example(n=1, seed=1, kind="wide")
@example(n=31, seed=2, kind="positive")
@example(n=33, seed=3, kind="wide")
@example(n=255, seed=4, kind="normal")
@example(n=257, seed=5, kind="positive")
@example(n=1000, seed=6, kind="wide")
def test_sum_matches_float64_reference_within_the_bound(variant, n, seed, kind):
    x = make_data(n, seed, kind)
    got = reduction.reduce_sum(x, variant=variant)
    assert isinstance(got, float)
    assert_within_bound(got, x, variant)


@pytest.mark.parametrize("n", EDGE_SIZES[1:] + [1 << 20, (1 << 26) + 13])
def test_depths_stay_within_n_and_grow_as_derived(n):
    depths = {v: reduction_error.addition_depth(n, v) for v in reduction.VARIANTS}
    assert all(1 <= d <= n for d in depths.values())
    assert depths["v1_atomic"] == n
    launches = max(1, math.ceil(math.log(n, TPB)))  # n -> n/256 -> ... -> 1
    assert depths["v2_interleaved"] == depths["v3_sequential"] == min(n, 8 * launches)
    assert depths["v4_first_add_grid_stride"] == depths["v5_warp_shuffle"]
    if n > 8 * TPB * 1024:  # the bound that matters: far below v1's n
        assert depths["v6_one_pass_atomic"] < n / 100


def test_the_bound_is_tight_enough_to_catch_a_lost_element():
    x = make_data(300, seed=11, kind="positive")  # every element >= 0.5
    exact = reduction.reduce_sum(x, variant="v6_one_pass_atomic")
    assert_within_bound(exact, x, "v6_one_pass_atomic")
    with pytest.raises(AssertionError, match="bound"):
        assert_within_bound(exact - float(x[0]), x, "v6_one_pass_atomic")


# ------------------------------------------------------------------------------------------
# The passes: block-partials counts for lengths just above a multiple of the block
# ------------------------------------------------------------------------------------------


class HostKernel:
    """Stands in for a block-partials kernel: records each launch and writes, for every
    block, the float64 sum of the elements its threads read (one each, or grid-stride)."""

    def __init__(self, grid_stride: bool) -> None:
        self.grid_stride = grid_stride
        self.launches: list[tuple[int, int, int, int]] = []

    def __getitem__(self, config):
        blocks, threads = config

        def launch(x, out):
            host = x.copy_to_host().astype(np.float64)
            self.launches.append((host.size, blocks, threads, out.size))
            i = np.arange(host.size)
            owner = (i % (blocks * threads) if self.grid_stride else i) // threads
            sums = np.bincount(owner, weights=host, minlength=blocks)  # a block past the
            result = out.copy_to_host()  # grid (owner >= blocks) is never written
            result[:blocks] = sums[:blocks]
            out.copy_to_device(result)

        return launch


@pytest.mark.parametrize(
    ("n", "expected"),
    [
        (1, [(1, 1, TPB, 1)]),
        (256, [(256, 1, TPB, 1)]),
        (257, [(257, 2, TPB, 2), (2, 1, TPB, 1)]),
        (65536, [(65536, 256, TPB, 256), (256, 1, TPB, 1)]),
        (65537, [(65537, 257, TPB, 257), (257, 2, TPB, 2), (2, 1, TPB, 1)]),
    ],
)
def test_tree_passes_launch_until_one_block_is_left(n, expected):
    kernel = HostKernel(grid_stride=False)
    x = np.arange(n, dtype=np.float32) % 7
    out = reduction.poisoned(1)
    reduction.tree_passes(kernel, cuda.to_device(x), out)
    assert kernel.launches == expected
    assert out.copy_to_host()[0] == x.sum(dtype=np.float64)


@pytest.mark.parametrize("extra", [0, 1, 255])
@pytest.mark.parametrize("full_blocks", [1, 2, 3, 4, 7])
def test_grid_stride_passes_use_the_grid_then_one_block(full_blocks, extra):
    n = full_blocks * TPB + extra
    grid = min(resident_blocks(TPB), math.ceil(n / TPB))  # 4 simulated
    kernel = HostKernel(grid_stride=True)
    x = np.arange(n, dtype=np.float32) % 5
    out = reduction.poisoned(1)
    reduction.grid_stride_passes(kernel, cuda.to_device(x), out)
    expected = [(n, grid, TPB, grid), (grid, 1, TPB, 1)] if grid > 1 else [(n, 1, TPB, 1)]
    assert kernel.launches == expected
    assert out.copy_to_host()[0] == x.sum(dtype=np.float64)


class Spy:
    """Wraps a real kernel; keeps a host copy of what each launch wrote."""

    def __init__(self, kernel) -> None:
        self.kernel, self.outputs = kernel, []

    def __getitem__(self, config):
        def launch(x, out):
            self.kernel[config](x, out)
            self.outputs.append(out.copy_to_host())

        return launch


@pytest.mark.parametrize(
    ("passes", "kernel", "n"),
    [
        (reduction.tree_passes, reduction.v3_sequential, TPB + 1),  # one block over, then one
        (
            reduction.grid_stride_passes,
            reduction.v5_warp_shuffle,
            4 * TPB + 1,
        ),  # a full grid (simulator)
    ],
)
def test_real_first_pass_writes_every_block_partial(passes, kernel, n):
    grid_stride = passes is reduction.grid_stride_passes
    blocks = grid.grid_stride_blocks(n, TPB) if grid_stride else math.ceil(n / TPB)
    x = make_data(n, seed=n, kind="positive")
    spy = Spy(kernel)
    out = reduction.poisoned(1)
    passes(spy, cuda.to_device(x), out)
    first, last = spy.outputs
    assert first.shape == (blocks,) and not np.isnan(first).any()
    i = np.arange(n)
    owner = (i % (blocks * TPB) if grid_stride else i) // TPB
    per_block = np.bincount(owner, weights=x.astype(np.float64), minlength=blocks)
    np.testing.assert_allclose(first, per_block, rtol=16 * EPS32)
    assert last.shape == (1,) and last[0] == out.copy_to_host()[0]


# ------------------------------------------------------------------------------------------
# Poisoning: a block that does not write (or add) is caught
# ------------------------------------------------------------------------------------------


def skip_last_block(x, out):
    partials = reduction.poisoned(math.ceil(x.size / TPB))
    reduction.v3_sequential[partials.size - 1, TPB](x, partials)  # one block short
    reduction.v3_sequential[1, TPB](partials, out)


def one_partial_too_many(x, out):
    partials = reduction.poisoned(3)  # but only two blocks are launched to fill it
    reduction.v5_warp_shuffle[2, TPB](x, partials)
    reduction.v5_warp_shuffle[1, TPB](partials, out)


def atomic_one_block_short(x, out):
    reduction.zero_accumulator(out)
    reduction.v1_atomic[math.ceil(x.size / TPB) - 1, TPB](x, out)


def atomic_without_zeroing(x, out):
    reduction.v1_atomic[math.ceil(x.size / TPB), TPB](x, out)


def last_block_with_a_stale_counter(x, out):
    """v7 with its counter left at 1 by a launch that never finished: block 0 draws the
    ticket the last block should draw and sums before block 1 has written its partial."""
    partials, arrived = reduction.workspace()
    arrived.copy_to_device(np.ones(1, dtype=np.int32))
    try:
        reduction.v7_last_block[grid.grid_stride_blocks(x.size, TPB), TPB](
            x, out, partials, arrived
        )
    finally:
        arrived.copy_to_device(np.zeros(1, dtype=np.int32))
        partials.copy_to_device(np.full(partials.size, np.nan, dtype=np.float32))


@pytest.mark.parametrize(
    ("broken", "like", "nan"),
    [
        (skip_last_block, "v3_sequential", True),
        (one_partial_too_many, "v5_warp_shuffle", True),
        (atomic_one_block_short, "v1_atomic", False),
        (atomic_without_zeroing, "v1_atomic", True),
        (last_block_with_a_stale_counter, "v7_last_block", True),
    ],
)
def test_a_launcher_that_skips_work_fails_the_check(monkeypatch, broken, like, nan):
    monkeypatch.setitem(reduction.VARIANTS, "broken", broken)
    x = make_data(300, seed=12, kind="positive")  # > 1 block; no cancellation hides a loss
    got = reduction.reduce_sum(x, variant="broken")
    assert math.isnan(got) == nan
    with pytest.raises(AssertionError):
        assert_within_bound(got, x, like)


# ------------------------------------------------------------------------------------------
# v7: one launch, no allocation or memset per call, a workspace left ready for the next
# ------------------------------------------------------------------------------------------


class Counting:
    """Wraps a kernel; counts launches and their grids."""

    def __init__(self, kernel) -> None:
        self.kernel, self.grids = kernel, []

    def __getitem__(self, config):
        self.grids.append(config[0])
        return self.kernel[config]


def test_v7_is_one_launch_without_allocation_or_memset(monkeypatch):
    x = cuda.to_device(make_data(3 * TPB + 5, seed=18, kind="positive"))
    out = reduction.poisoned(1)
    reduction.VARIANTS["v7_last_block"](x, out)  # the first call allocates the workspace

    def forbidden(*args, **kwargs):
        raise AssertionError("v7 allocated or set memory in a call after the first")

    for module, name in ((reduction.cuda, "device_array"), (reduction.cuda, "to_device"),
                         (reduction.driver, "device_memset"), (reduction, "poisoned")):
        monkeypatch.setattr(module, name, forbidden)
    spy = Counting(reduction.v7_last_block)
    monkeypatch.setattr(reduction, "v7_last_block", spy)
    for _ in range(3):  # the same answer each time, from the workspace the last block reset
        reduction.VARIANTS["v7_last_block"](x, out)
        assert_within_bound(float(out.copy_to_host()[0]), x.copy_to_host(), "v7_last_block")
    assert spy.grids == [grid.grid_stride_blocks(x.size, TPB)] * 3


def test_v7_leaves_its_counter_at_zero_and_its_partials_poisoned():
    for n in (1, 300, 4 * TPB + 1):
        x = make_data(n, seed=n, kind="wide")
        assert_within_bound(reduction.reduce_sum(x, "v7_last_block"), x, "v7_last_block")
        partials, arrived = reduction.workspace()
        assert arrived.copy_to_host()[0] == 0
        assert np.isnan(partials.copy_to_host()).all()


# ------------------------------------------------------------------------------------------
# NaN and inf
# ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("variant", list(reduction.VARIANTS))
def test_nan_propagates(variant):
    x = make_data(40, seed=13)
    x[-1] = np.nan
    assert math.isnan(reduction.reduce_sum(x, variant=variant))


@pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")
@pytest.mark.parametrize("variant", list(reduction.VARIANTS))
def test_inf_as_in_numpy(variant):
    x = make_data(40, seed=14)
    x[3] = np.inf
    assert reduction.reduce_sum(x, variant=variant) == np.sum(x) == math.inf
    x[20] = -np.inf
    assert math.isnan(reduction.reduce_sum(x, variant=variant)) and math.isnan(np.sum(x))


@pytest.mark.filterwarnings("ignore:overflow encountered:RuntimeWarning")
def test_a_sum_past_the_float32_range_overflows_to_inf():
    x = np.full(3, 2e38, dtype=np.float32)
    assert reduction.reduce_sum(x, variant="v3_sequential") == np.sum(x) == math.inf


def test_reference_sum_is_exact_and_numpy_like_for_non_finite():
    x = np.array([1e8, 1.0, -1e8, 1e-8], dtype=np.float32)
    assert reduction.reference_sum(x) == math.fsum(x.astype(np.float64))
    assert reduction.reference_sum(np.array([1, np.inf], np.float32)) == math.inf
    assert math.isnan(reduction.reference_sum(np.array([-np.inf, np.inf], np.float32)))
    assert reduction.reference_sum(cuda.to_device(x)) == reduction.reference_sum(x)


# ------------------------------------------------------------------------------------------
# Host and device arrays, empty input
# ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("variant", ["v2_interleaved", "v6_one_pass_atomic"])
def test_device_arrays_are_accepted_and_left_alone(variant):
    x = make_data(300, seed=15)
    x_d = cuda.to_device(x)
    got = reduction.reduce_sum(x_d, variant=variant)
    assert isinstance(got, float)
    assert_within_bound(got, x, variant)
    np.testing.assert_array_equal(x_d.copy_to_host(), x)


@pytest.mark.parametrize("on_device", [False, True])
def test_empty_input_gives_zero_without_a_launch(monkeypatch, on_device):
    def no_launch(x, out):
        raise AssertionError("launched on empty input")

    empty = np.empty(0, dtype=np.float32)
    for variant in reduction.VARIANTS:
        monkeypatch.setitem(reduction.VARIANTS, variant, no_launch)
        got = reduction.reduce_sum(cuda.to_device(empty) if on_device else empty, variant=variant)
        assert got == 0.0 and isinstance(got, float)


# ------------------------------------------------------------------------------------------
# Bad input: clear errors
# ------------------------------------------------------------------------------------------

GOOD = np.ones(8, dtype=np.float32)


@pytest.mark.parametrize(
    ("x", "error", "match"),
    [
        ([1.0] * 8, TypeError, "x must be a NumPy array or a numba device array, got list"),
        (None, TypeError, "got NoneType"),
        (np.float32(1.0), TypeError, "got float32"),
        (GOOD.astype(np.float64), TypeError, "x must have dtype float32, got float64"),
        (GOOD.astype(np.int32), TypeError, "x must have dtype float32, got int32"),
        (GOOD.reshape(2, 4), ValueError, r"x must be 1-D, got 2-D with shape \(2, 4\)"),
        (np.array(1.0, np.float32), ValueError, "x must be 1-D, got 0-D"),
        (np.ones(16, np.float32)[::2], ValueError, "x must be C-contiguous"),
        (cuda.to_device(np.ones(16, np.float32))[::2], ValueError, "x must be C-contiguous"),
    ],
)
def test_bad_input_is_rejected(x, error, match):
    with pytest.raises(error, match=match):
        reduction.reduce_sum(x)
    with pytest.raises(error, match=match):
        reduction.reference_sum(x)


def test_unknown_variant_lists_the_variants():
    with pytest.raises(ValueError, match=r"variant must be one of \['v1_atomic', .*'v6_"):
        reduction.reduce_sum(GOOD, variant="v7")
    with pytest.raises(ValueError, match="variant must be one of"):
        reduction_error.addition_depth(8, "v7")


@pytest.mark.parametrize(("n", "error", "match"), [
    (0, ValueError, "n must be >= 1"), (-1, ValueError, "n must be >= 1"),
    (2.0, TypeError, "n must be an int"), (True, TypeError, "n must be an int"),
])
def test_addition_depth_needs_a_positive_length(n, error, match):
    with pytest.raises(error, match=match):
        reduction_error.addition_depth(n, "v1_atomic")


def test_block_size_is_a_power_of_two_with_two_warps_at_least():
    assert TPB == 256 and TPB & (TPB - 1) == 0 and reduction.LOG2_TPB == 8


# ------------------------------------------------------------------------------------------
# On a GPU only
# ------------------------------------------------------------------------------------------


@pytest.mark.gpu
@pytest.mark.parametrize("variant", list(reduction.VARIANTS))
def test_large_sums_on_the_gpu(variant):
    n = backend.pick(gpu=(1 << 23) - 13, sim=300)  # v2/v3: three launches; v1: depth < 2**23
    x = make_data(n, seed=16, kind="positive")
    assert_within_bound(reduction.reduce_sum(x, variant=variant), x, variant)


@pytest.mark.gpu
def test_best_variant_beats_torch_sum_at_85_percent_of_copy_bandwidth():
    stored = load_or_run("memory")  # this commit's stored run, measured now if there is none
    assert find_bar(stored, "best_reduction_vs_torch_copy")["verdict"], stored["bars"]
    assert find_bar(stored, "best_reduction_vs_torch_sum")["verdict"], stored["bars"]
