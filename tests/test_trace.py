"""gpudl.trace: exact records on hand-written kernels, and the analytic sector counts and bank
conflicts of the Chapter 2 kernels."""

import inspect
import math

import numpy as np
import pytest

from gpudl import backend  # first: chooses GPU or simulator before numba is imported

# isort: split
from numba import cuda, float32

from gpudl import trace
from gpudl.kernels import memory, transpose

pytestmark = pytest.mark.simulator_only

A, B = 1 << 32, 2 << 32  # where the tracer places kernel arguments 0 and 1


def line_of(kernel, text: str) -> int:
    """The source line number of the first line of ``kernel`` that contains ``text``."""
    lines, start = inspect.getsourcelines(kernel.py_func)
    return start + next(i for i, line in enumerate(lines) if text in line)


def poisoned(shape) -> np.ndarray:
    return np.full(shape, np.nan, dtype=np.float32)


# ------------------------------------------------------------------------------------------
# The tracer on kernels whose every access is known
# ------------------------------------------------------------------------------------------


@cuda.jit
def load_one(a, out):
    i = cuda.grid(1)
    out[i] = a[i]


def test_two_warps_one_load_each_give_the_exact_records():
    a = np.arange(64, dtype=np.float32)
    out = poisoned(64)
    t = trace.trace(load_one, 1, 64, a, out)
    line = line_of(load_one, "out[i] = a[i]")
    expected = [trace.Access(line, "global", "a", "load", (0, 0, 0), i, 0, A + 4 * i, 4)
                for i in range(64)]
    expected += [trace.Access(line, "global", "out", "store", (0, 0, 0), i, 0, B + 4 * i, 4)
                 for i in range(64)]
    assert t.accesses == tuple(expected)
    assert t.kernel == "load_one" and t.parameters == ("a", "out")
    loads = t.requests(op="load")
    assert [(r.warp, r.lanes, r.sectors, r.ideal_sectors) for r in loads] == [
        (0, tuple(range(32)), 4, 4),
        (1, tuple(range(32)), 4, 4),
    ]
    assert loads[1].addresses == tuple(A + 4 * i for i in range(32, 64))
    np.testing.assert_array_equal(out, a)


@cuda.jit
def row_sums(x, out):
    r = cuda.threadIdx.x
    row = x[r]
    acc = 0.0
    for j in range(x.shape[1]):
        acc += row[j]
    out[r] = acc


def test_sub_arrays_and_repeated_lines_give_one_request_per_occurrence():
    # Lane r reads x[r, j] through the row view x[r]: 32 lanes 16 bytes apart, in 16 sectors.
    x = np.arange(128, dtype=np.float32).reshape(32, 4)
    out = poisoned(32)
    t = trace.trace(row_sums, 1, 32, x, out)
    loads = t.requests(kind="global", op="load", array="x")
    assert [r.occurrence for r in loads] == [0, 1, 2, 3]
    for j, r in enumerate(loads):
        assert r.line == line_of(row_sums, "acc += row[j]")
        assert r.addresses == tuple(A + 16 * lane + 4 * j for lane in range(32))
        assert r.sectors == 16 and r.ideal_sectors == 4
    assert t.sectors_per_request(0) == trace.RequestStats(4, 16.0, 16, 4.0)
    np.testing.assert_array_equal(out, x.sum(axis=1))


@cuda.jit
def atomic_total(a, out):
    cuda.atomic.add(out, 0, a[cuda.threadIdx.x])


def test_accesses_made_inside_the_simulator_are_charged_to_the_kernel_line():
    a = np.ones(32, dtype=np.float32)
    out = np.zeros(1, dtype=np.float32)
    t = trace.trace(atomic_total, 1, 32, a, out)
    line = line_of(atomic_total, "cuda.atomic.add")
    assert {(x.line, x.address) for x in t.accesses if x.array == "out"} == {(line, B)}
    assert out[0] == 32


@cuda.jit
def dynamic_stride_two(out):
    buf = cuda.shared.array(0, float32)
    t = cuda.threadIdx.x
    buf[2 * t] = t
    cuda.syncthreads()
    out[t] = buf[2 * t]


def test_dynamic_shared_memory_is_traced_and_stride_two_is_a_two_way_conflict():
    # Words 0, 2, ..., 62: banks 0, 2, ..., 30, each holding two of them.
    out = poisoned(32)
    t = trace.trace(dynamic_stride_two, 1, 32, out, dynamic_shared_bytes=256)
    (store,) = t.requests(kind="shared", op="store")
    assert store.array == "dynamic" and store.addresses == tuple(
        trace._DYNAMIC_SHARED_BASE + 8 * i for i in range(32)
    )
    assert t.bank_conflict_degree(op="store") == trace.RequestStats(1, 2.0, 2, 1.0)
    np.testing.assert_array_equal(out, np.arange(32))


def test_request_figures_on_hand_made_requests():
    def request(addresses, size=4):
        lanes = tuple(range(len(addresses)))
        return trace.Request(
            1, "global", "a", "load", (0, 0, 0), 0, 0, lanes, tuple(addresses), size
        )

    broadcast = request([0] * 32)
    assert (broadcast.sectors, broadcast.ideal_sectors, broadcast.conflict_degree) == (1, 1, 1)
    doubles = request([8 * i for i in range(32)], size=8)  # 256 bytes: 8 sectors, 2 words each
    assert (doubles.sectors, doubles.ideal_sectors, doubles.conflict_degree) == (8, 8, 2)
    same_bank = request([0, 128, 128, 256])  # words 0, 32, 64 all in bank 0; one shared
    assert same_bank.conflict_degree == 3
    straddling = request([30], size=4)  # bytes 30..33 span two sectors
    assert straddling.sectors == 2


# ------------------------------------------------------------------------------------------
# Analytic answers for the Chapter 2 kernels
# ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("stride", "sectors"), [(1, 4), (2, 8), (32, 32)])
def test_strided_copy_sectors_per_warp_load(stride, sectors):
    x = np.arange(1024, dtype=np.float32)
    out = poisoned(1024 // stride)
    t = trace.trace(memory.copy_strided_kernel, math.ceil(out.size / 256), 256, x, out, stride)
    assert t.sectors_per_request("x") == trace.RequestStats(out.size // 32, sectors, sectors, 4.0)
    assert t.sectors_per_request("out", op="store").max == 4  # the writes stay coalesced
    np.testing.assert_array_equal(out, x[::stride])


@pytest.mark.parametrize(("offset", "sectors"), [(1, 5), (7, 5), (8, 4)])
def test_misaligned_copy_needs_one_more_sector_unless_offset_is_a_whole_sector(offset, sectors):
    x = np.arange(1024 + offset, dtype=np.float32)
    out = poisoned(1024)
    t = trace.trace(memory.copy_offset_kernel, 4, 256, x, out, offset)
    assert t.sectors_per_request(0) == trace.RequestStats(32, sectors, sectors, 4.0)
    np.testing.assert_array_equal(out, x[offset:])


def test_coalesced_copy_summary_is_deterministic():
    x = np.arange(256, dtype=np.float32)
    line = line_of(memory.copy_v1_naive, "out[i] = x[i]")
    summaries = {trace.trace(memory.copy_v1_naive, 1, 256, x, poisoned(256)).summary()
                 for _ in "ab"}
    assert summaries == {
        f"line {line} global load x: 8 requests, 4.0 sectors/request (ideal 4.0)\n"
        f"line {line} global store out: 8 requests, 4.0 sectors/request (ideal 4.0)"
    }


@pytest.fixture(scope="module")
def transposes() -> dict[str, tuple[trace.Trace, np.ndarray]]:
    """Each transpose variant traced on a 64 x 64 matrix (4 blocks of 32 x 8 threads)."""
    x = np.arange(64 * 64, dtype=np.float32).reshape(64, 64)
    traced = {}
    for name, kernel in [("v1_naive", transpose.v1_naive), ("v2_shared", transpose.v2_shared),
                         ("v3_padded", transpose.v3_padded)]:
        out = poisoned((64, 64))
        traced[name] = (trace.trace(kernel, *transpose.transpose_grid(x.shape), x, out), out)
    out = poisoned((64, 64))  # blocks of 32 x 4 threads, 8 rows of the tile each
    grid, _ = transpose.transpose_grid(x.shape)
    traced["v4_padded_loads_first"] = (trace.trace(transpose.v4_padded_loads_first, grid,
                                             (transpose.TILE, transpose.LOADS_ROWS), x, out), out)
    return traced


def test_naive_transpose_reads_4_sectors_and_writes_32(transposes):
    # A warp is one row of 32 threads: it reads 32 consecutive words of a row of x and
    # writes them down a column of out, 64 * 4 = 256 bytes apart.
    t, out = transposes["v1_naive"]
    assert t.sectors_per_request("x") == trace.RequestStats(128, 4.0, 4, 4.0)
    assert t.sectors_per_request("out", op="store") == trace.RequestStats(128, 32.0, 32, 4.0)
    assert not t.requests(kind="shared")


@pytest.mark.parametrize(("variant", "column_read"), [("v2_shared", 32), ("v3_padded", 1)])
def test_tiled_transposes_coalesce_both_sides_and_pad_away_the_conflicts(
    transposes, variant, column_read
):
    t, out = transposes[variant]
    assert t.sectors_per_request("x").max == 4
    assert t.sectors_per_request("out", op="store").max == 4
    row_write = t.bank_conflict_degree("tile", op="store")
    column = t.bank_conflict_degree("tile", op="load")
    assert (row_write.requests, row_write.max) == (128, 1)
    assert column == trace.RequestStats(128, float(column_read), column_read, 1.0)


def test_the_transpose_that_loads_first_stays_coalesced_and_conflict_free(transposes):
    # Loading all eight rows first changes the order of the accesses, not their pattern.
    t, _ = transposes["v4_padded_loads_first"]
    assert t.sectors_per_request("x") == trace.RequestStats(128, 4.0, 4, 4.0)
    assert t.sectors_per_request("out", op="store") == trace.RequestStats(128, 4.0, 4, 4.0)
    for op in ("store", "load"):
        degree = t.bank_conflict_degree("tile", op=op)
        assert (degree.requests, degree.max) == (128, 1)


@pytest.mark.parametrize("variant", sorted(transpose.VARIANTS))
def test_traced_transposes_equal_untraced_ones(transposes, variant):
    t, out = transposes[variant]
    x = np.arange(64 * 64, dtype=np.float32).reshape(64, 64)
    np.testing.assert_array_equal(out, transpose.transpose(x, variant=variant))
    np.testing.assert_array_equal(out, x.T)


def test_padded_summary_names_the_tile_and_its_conflicts(transposes):
    t, _ = transposes["v3_padded"]
    read = line_of(transpose.v3_padded, "tile[ty + k, tx] = x[")
    write = line_of(transpose.v3_padded, "= tile[tx, ty + k]")
    assert t.summary().splitlines() == [
        f"line {read} global load x: 128 requests, 4.0 sectors/request (ideal 4.0)",
        f"line {read} shared store tile: 128 requests, 1.0-way bank conflicts (max 1)",
        f"line {write} shared load tile: 128 requests, 1.0-way bank conflicts (max 1)",
        f"line {write} global store out: 128 requests, 4.0 sectors/request (ideal 4.0)",
    ]


def test_device_arrays_are_traced_in_place():
    x = np.arange(300, dtype=np.float32)
    x_d, out_d = cuda.to_device(x), cuda.to_device(poisoned(300))
    t = trace.trace(memory.copy_v1_naive, 2, 256, x_d, out_d)
    assert t.sectors_per_request("x").requests == 10  # 300 threads: 9 full warps and 12 lanes
    np.testing.assert_array_equal(out_d.copy_to_host(), x)


# ------------------------------------------------------------------------------------------
# The simulator is left as it was found; bad arguments
# ------------------------------------------------------------------------------------------


@cuda.jit
def reads_past_the_end(x):
    tile = cuda.shared.array(32, float32)
    tile[cuda.threadIdx.x] = x[cuda.threadIdx.x + 1]


def test_the_shared_array_factory_is_restored_even_when_the_kernel_raises():
    from numba.cuda.simulator import kernelapi

    original = kernelapi.FakeCUDAShared.array
    with pytest.raises(IndexError):
        trace.trace(reads_past_the_end, 1, 32, np.zeros(32, np.float32))
    assert kernelapi.FakeCUDAShared.array is original
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    np.testing.assert_array_equal(transpose.transpose(x, variant="v2_shared"), x.T)


def test_tracing_refuses_a_real_gpu(monkeypatch):
    monkeypatch.setattr(backend, "is_simulator", lambda: False)
    with pytest.raises(RuntimeError, match="tracing needs Numba's CUDA simulator"):
        trace.trace(load_one, 1, 32, np.zeros(32, np.float32), poisoned(32))


def test_bad_arguments_are_rejected():
    a = np.zeros(32, np.float32)
    with pytest.raises(TypeError, match="kernel must be a @cuda.jit kernel, got function"):
        trace.trace(load_one.py_func, 1, 32, a, a)
    with pytest.raises(TypeError, match="load_one takes 2 arguments, got 1"):
        trace.trace(load_one, 1, 32, a)
    t = trace.trace(load_one, 1, 32, a, poisoned(32))
    with pytest.raises(ValueError, match="kind must be one of"):
        t.requests(kind="local")
    with pytest.raises(ValueError, match="op must be one of"):
        t.requests(op="read")
    with pytest.raises(ValueError, match=r"array position must be in \[0, 2\), got 2"):
        t.requests(array=2)
    with pytest.raises(TypeError, match="array must be a name, a position or None"):
        t.requests(array=1.0)
    with pytest.raises(ValueError, match="no shared load/store requests"):
        t.bank_conflict_degree()


def test_reports_give_the_analytic_answers():
    rows = {r["pattern"]: r["sectors"] for r in memory.coalescing_report((1, 2, 32), (1,))}
    assert rows == {"stride 1": 4.0, "stride 2": 8.0, "stride 32": 32.0, "offset 1": 5.0}
    report = transpose.transpose_report(64)
    assert (report["v1_naive"]["read_sectors"], report["v1_naive"]["write_sectors"]) == (4.0, 32.0)
    assert report["v2_shared"]["tile_load_conflicts"] == 32
    assert report["v3_padded"]["tile_load_conflicts"] == 1
    assert report["v3_padded"]["write_sectors"] == 4.0


def test_on_simulator_runs_in_a_child_when_this_process_uses_a_gpu(monkeypatch):
    import os

    from gpudl import backend
    from gpudl.trace import on_simulator

    monkeypatch.setattr(backend, "is_simulator", lambda: False)  # pretend to be on a GPU
    monkeypatch.delenv("GPUDL_BACKEND", raising=False)
    assert on_simulator(os.getpid) != os.getpid()  # ran in another process...
    assert on_simulator(backend.name) == "simulator"  # ...which chose the simulator
    assert "GPUDL_BACKEND" not in os.environ  # and this process's environment is restored


def test_reduction_trees_warp_level_steps_interleaved_vs_sequential():
    """Chapter 2's count: the tree stores of one 256-thread block take 47 warp requests with
    interleaved addressing (a warp works while any of its lanes does) and 12 with sequential
    addressing (4 + 2 + 1 + 1 + 1 + 1 + 1 + 1), with no bank conflicts in either."""
    from collections import Counter

    from gpudl.kernels import reduction

    counts = {}
    for kernel in (reduction.v2_interleaved, reduction.v3_sequential):
        x, partial = np.ones(256, dtype=np.float32), np.full(1, np.nan, dtype=np.float32)
        stores = trace.trace(kernel, 1, 256, x, partial).requests(kind="shared", op="store")
        assert partial[0] == 256
        assert max(r.conflict_degree for r in stores) == 1
        per_line = sorted(Counter(r.line for r in stores).values())
        assert per_line[0] == 8  # the first store into the tile: one request per warp
        counts[kernel] = per_line[1]
    assert (counts[reduction.v2_interleaved], counts[reduction.v3_sequential]) == (47, 12)
