"""gpudl.kernels.hierarchy and its timing in gpudl.bench.hierarchy: the pointer chains and
chases, the bandwidth kernels against NumPy, the ratio table, bad input; on a GPU, the order of
the levels (from the stored memory benchmark)."""

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from gpudl import backend  # first: chooses GPU or simulator before numba is imported

# isort: split
from numba import cuda

from gpudl import hardware
from gpudl.bench import hierarchy as bench_hierarchy
from gpudl.bench import load_or_run
from gpudl.estimate import register_file_bandwidth_gbs
from gpudl.kernels import hierarchy as hierarchy_kernels

few = settings(max_examples=8, deadline=None, database=None)
seeds = st.integers(min_value=0, max_value=2**32 - 1)


def follow(chain: np.ndarray, start: int, steps: int) -> list[int]:
    """The indices visited from ``start``, in plain Python."""
    visited, j = [], start
    for _ in range(steps):
        j = int(chain[j])
        visited.append(j)
    return visited


def small_ints(n: int, seed: int) -> np.ndarray:
    # Integers 0..7 as float32: every partial sum below 2**24 is exact in float32, so the
    # kernels must match the float64 reference exactly whatever order they add in.
    return np.random.default_rng(seed).integers(0, 8, n).astype(np.float32)


# ------------------------------------------------------------------------------------------
# Chains
# ------------------------------------------------------------------------------------------


@few
@given(n=st.integers(1, 3000), stride=st.integers(1, 70), seed=seeds)
@example(n=1, stride=1, seed=0)
@example(n=5, stride=8, seed=0)  # one slot: a cycle of length 1
@example(n=4096, stride=32, seed=0)
def test_chain_is_one_cycle_over_all_slots(n, stride, seed):
    chain = hierarchy_kernels.make_chain(n, stride, seed=seed)
    slots = list(range(0, n, stride))
    assert chain.dtype == np.int32 and chain.shape == (n,)
    visited = follow(chain, 0, len(slots))
    assert visited[-1] == 0  # back at the start after exactly one lap...
    assert sorted(visited) == slots  # ...having visited every slot once
    others = np.ones(n, dtype=bool)
    others[slots] = False
    assert (chain[others] == -1).all()


def test_chain_order_is_random():
    chain = hierarchy_kernels.make_chain(4096, 32, seed=0)
    slots = np.arange(0, 4096, 32)
    to_next_slot = np.mean(chain[slots] == (slots + 32) % 4096)
    assert to_next_slot < 0.1  # a sequential chain would give 1.0
    assert not np.array_equal(chain, hierarchy_kernels.make_chain(4096, 32, seed=1))
    np.testing.assert_array_equal(chain, hierarchy_kernels.make_chain(4096, 32, seed=0))


@pytest.mark.parametrize(
    "args, error",
    [
        ((100, 0), ValueError),  # stride < 1
        ((0, 1), ValueError),  # no element
        ((100, 2.0), TypeError),
        ((True, 1), TypeError),
    ],
)
def test_make_chain_bad_input(args, error):
    with pytest.raises(error):
        hierarchy_kernels.make_chain(*args)


# ------------------------------------------------------------------------------------------
# Chases
# ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("shared", [False, True])
def test_chase_ends_where_the_host_does(shared):
    chain = hierarchy_kernels.make_chain(1000, 8, seed=3)  # 125 slots
    for steps in (1, 2, 7, 124, 125, 126, 300):
        expected = follow(chain, 0, steps)[-1]
        assert hierarchy_kernels.reference_chase(chain, steps) == expected
        assert hierarchy_kernels.pointer_chase(chain, steps, shared=shared) == expected


def test_chase_bad_input():
    chain = hierarchy_kernels.make_chain(64, 4)
    with pytest.raises(ValueError, match="steps"):
        hierarchy_kernels.pointer_chase(chain, 0)
    with pytest.raises(ValueError, match="start"):
        hierarchy_kernels.reference_chase(chain, 3, start=1)  # not a slot
    with pytest.raises(TypeError, match="int32"):
        hierarchy_kernels.pointer_chase(chain.astype(np.float32), 3)
    with pytest.raises(TypeError, match="NumPy"):
        hierarchy_kernels.pointer_chase(list(chain), 3)
    with pytest.raises(ValueError, match="fit"):
        hierarchy_kernels.pointer_chase(
            hierarchy_kernels.make_chain(13_000, 32), 3, shared=True
        )  # 52 KB > 48 KiB


@pytest.mark.parametrize("shared", [False, True])
def test_latency_result(shared):
    result = bench_hierarchy.latency(2048, steps=16, shared=shared)
    assert result["memory"] == ("shared" if shared else "global")
    assert result["slots"] == 2048 // hierarchy_kernels.LINE_BYTES
    assert result["steps"] == (16, 32)
    assert len(result["timings"]) == 2
    assert result["meaningful"] == (not backend.is_simulator())
    if hardware.describe().sm_clock_khz is None:
        assert result["cycles_per_hop"] is None


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"working_set_bytes": 3}, "at least one 4-byte element"),
        ({"working_set_bytes": 1024, "steps": 0}, "steps"),
        ({"working_set_bytes": 1024, "stride_bytes": 0}, "stride_bytes"),
        ({"working_set_bytes": 64 * hierarchy_kernels.KiB, "shared": True}, "fit"),
    ],
)
def test_latency_bad_input(kwargs, match):
    with pytest.raises(ValueError, match=match):
        bench_hierarchy.latency(**kwargs)


# ------------------------------------------------------------------------------------------
# Bandwidth kernels
# ------------------------------------------------------------------------------------------


@few
@given(
    n=st.integers(1, 3000),
    reps=st.integers(1, 3),
    blocks=st.integers(1, 3),
    threads=st.sampled_from([32, 64]),
    seed=seeds,
)
@example(n=1, reps=1, blocks=1, threads=32, seed=0)  # most threads read nothing
@example(n=4 * 96 + 5, reps=3, blocks=3, threads=32, seed=1)  # unrolled loop and tail
def test_read_sums_match_numpy(n, reps, blocks, threads, seed):
    a = small_ints(n, seed)
    got = hierarchy_kernels.read_sums(a, reps=reps, blocks=blocks, threads_per_block=threads)
    assert got.dtype == np.float32 and got.shape == (blocks * threads,)
    np.testing.assert_array_equal(
        got, hierarchy_kernels.reference_read_sums(a, reps, blocks, threads)
    )


def test_read_sums_rotate_between_repetitions():
    # With reps=2, thread g also sums what thread g + 32 summed in the first repetition.
    a = np.zeros(64, dtype=np.float32)
    a[40] = 1.0
    got = hierarchy_kernels.read_sums(a, reps=2, blocks=2, threads_per_block=32)
    np.testing.assert_array_equal(np.flatnonzero(got), [8, 40])


def test_read_sums_on_device_arrays():
    a = small_ints(500, seed=5)
    out = hierarchy_kernels.read_sums(cuda.to_device(a), reps=2, blocks=1, threads_per_block=32)
    assert not isinstance(out, np.ndarray)
    np.testing.assert_array_equal(
        out.copy_to_host(), hierarchy_kernels.reference_read_sums(a, 2, 1, 32)
    )


@pytest.mark.parametrize("iters, blocks", [(1, 1), (3, 2), (40, 1)])  # 40: the base wraps
def test_shared_sums_match_numpy(iters, blocks):
    src = small_ints(hierarchy_kernels.SHARED_WORDS, seed=iters)
    got = hierarchy_kernels.shared_sums(src, iters, blocks=blocks)
    assert got.dtype == np.float32
    np.testing.assert_array_equal(got, hierarchy_kernels.reference_shared_sums(src, iters, blocks))


def test_bandwidth_kernels_bad_input():
    a = np.ones(100, dtype=np.float32)
    with pytest.raises(TypeError, match="float32"):
        hierarchy_kernels.read_sums(a.astype(np.float64))
    with pytest.raises(ValueError, match="reps"):
        hierarchy_kernels.read_sums(a, reps=0)
    with pytest.raises(ValueError, match="multiple of 32"):
        hierarchy_kernels.read_sums(a, threads_per_block=48)
    with pytest.raises(ValueError, match="contiguous"):
        hierarchy_kernels.read_sums(np.ones(200, dtype=np.float32)[::2])
    with pytest.raises(ValueError, match=str(hierarchy_kernels.SHARED_WORDS)):
        hierarchy_kernels.shared_sums(a, 1)
    with pytest.raises(ValueError, match="iters"):
        hierarchy_kernels.shared_sums(np.ones(hierarchy_kernels.SHARED_WORDS, dtype=np.float32), 0)
    with pytest.raises(ValueError, match="level"):
        bench_hierarchy.bandwidth("L3")


@pytest.mark.parametrize("level", bench_hierarchy.BANDWIDTH_LEVELS)
def test_bandwidth_result(level):
    result = bench_hierarchy.bandwidth(level)
    assert result["level"] == level
    assert result["gbs"] > 0
    if level == "HBM":  # read once
        assert result["bytes_read"] == result["working_set_bytes"]
    if level == "L2":  # read over and over, from a working set that fits in L2
        assert (
            result["bytes_read"] > result["working_set_bytes"] == bench_hierarchy.WORKING_SETS["L2"]
        )
    assert result["meaningful"] == (not backend.is_simulator())


# ------------------------------------------------------------------------------------------
# Register file and the table
# ------------------------------------------------------------------------------------------


def test_register_file_bandwidth_is_derived_from_the_device():
    h100 = hardware.DeviceInfo(
        backend="cuda", name="H100", sm_count=132, fp32_cores_per_sm=128, sm_clock_khz=1_980_000
    )
    # 16,896 cores x 3 operands x 4 bytes x 1.98 GHz
    assert register_file_bandwidth_gbs(h100) == pytest.approx(401_448.96)
    assert (
        register_file_bandwidth_gbs(hardware.DeviceInfo("cuda", "no clock"))
        is None
    )


def fake_results(meaningful: bool) -> dict:
    return {
        "latency": {
            "shared": {"ns_per_hop": 15.0, "meaningful": meaningful},
            "HBM": {"ns_per_hop": 300.0, "meaningful": meaningful},
        },
        "bandwidth": {
            "shared": {"gbs": 30_000.0, "meaningful": meaningful},
            "HBM": {"gbs": 3_000.0, "meaningful": meaningful},
        },
        "register_file_gbs": 360_000.0,
    }


def test_table_ratios():
    text = bench_hierarchy.table(fake_results(meaningful=True))
    shared_row = next(line for line in text.splitlines() if line.startswith("shared vs"))
    register_row = next(line for line in text.splitlines() if line.startswith("registers vs"))
    assert shared_row.split()[3:] == ["2-10x", "20.0x", "10.0x"]
    assert "20-30x" in register_row and "120x (derived, not measured)" in register_row
    assert "not measured (simulator)" not in text


def test_table_on_simulator_results():
    text = bench_hierarchy.table(fake_results(meaningful=False))
    assert text.count("not measured (simulator)") == 3
    assert "2-10x" in text and "20-30x" in text and "Table 1" in text


def test_table_from_measure():
    text = bench_hierarchy.table(bench_hierarchy.measure(steps=8))
    assert ("not measured (simulator)" in text) == backend.is_simulator()


def test_table_bad_input():
    with pytest.raises(ValueError, match="measure"):
        bench_hierarchy.table({"latency": {}})


# ------------------------------------------------------------------------------------------
# On a GPU: the hierarchy itself
# ------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def levels() -> dict:
    """On a GPU: the hierarchy of this commit's stored memory benchmark (measured now if none)."""
    return load_or_run("memory")["hierarchy"]


@pytest.mark.gpu
def test_latency_grows_down_the_hierarchy(levels):
    ns = {level: r["ns_per_hop"] for level, r in levels["latency"].items()}
    assert 0 < ns["shared"] < ns["L2"] < ns["HBM"], ns


@pytest.mark.gpu
def test_hbm_bandwidth_near_peak(levels):
    peak = hardware.describe().peak_memory_bandwidth_gbs
    if peak is None:
        pytest.skip("the driver does not report the memory clock")
    assert peak / 2 < levels["bandwidth"]["HBM"]["gbs"] < peak * 1.05


@pytest.mark.gpu
def test_shared_bandwidth_beats_hbm(levels):
    assert levels["bandwidth"]["shared"]["gbs"] > levels["bandwidth"]["HBM"]["gbs"]
