"""gpudl.simulator: the warp intrinsics, shared arrays and launch guard it adds to the
simulator."""

import sys
import threading

import numpy as np
import pytest
from numba import cuda

from gpudl import simulator


@pytest.mark.simulator_only
def test_intrinsics_installed_on_the_simulator_only():
    from numba.cuda.simulator import kernelapi

    for attr, fn in simulator.SIMULATED_INTRINSICS.items():
        assert getattr(kernelapi.FakeCUDAModule, attr) is fn


@pytest.mark.gpu
@pytest.mark.gpu
def test_intrinsics_not_installed_on_a_gpu():
    assert "simulator" not in cuda.__name__
    assert not any(
        getattr(cuda, attr, None) is fn for attr, fn in simulator.SIMULATED_INTRINSICS.items()
    )


# --- warp intrinsics, checked against results computed by hand ---------------------------

FULL = 0xFFFFFFFF


@cuda.jit
def _shuffle_kernel(out, op, arg):
    i = cuda.threadIdx.x
    v = np.float32(i)
    if op == 0:
        out[i] = cuda.shfl_sync(FULL, v, arg)
    elif op == 1:
        out[i] = cuda.shfl_up_sync(FULL, v, arg)
    elif op == 2:
        out[i] = cuda.shfl_down_sync(FULL, v, arg)
    elif op == 3:
        out[i] = cuda.shfl_xor_sync(FULL, v, arg)


def _shuffle(op: int, arg: int, n: int = 64) -> np.ndarray:
    out = np.full(n, np.nan, dtype=np.float32)
    _shuffle_kernel[1, n](out, op, arg)
    return out


def test_shfl_sync_broadcasts_a_lane_within_each_warp():
    out = _shuffle(0, 3)
    assert (out[:32] == 3).all() and (out[32:] == 35).all()


def test_shfl_sync_source_lane_wraps_modulo_32():
    assert (_shuffle(0, 33)[:32] == 1).all()


def test_shfl_up_keeps_own_value_below_delta():
    out = _shuffle(1, 2)
    # lanes 0 and 1 of each warp keep their own value, lane k takes lane k-2
    assert out[:4].tolist() == [0, 1, 0, 1] and out[32:36].tolist() == [32, 33, 32, 33]
    assert out[31] == 29


def test_shfl_down_does_not_cross_warps():
    out = _shuffle(2, 1)
    assert out[30] == 31 and out[31] == 31  # lane 31 keeps its own value, not lane 0 of warp 1
    assert out[32] == 33 and out[63] == 63


def test_shfl_xor_butterfly():
    out = _shuffle(3, 16)
    assert out[0] == 16 and out[16] == 0 and out[33] == 49 and out[63] == 47


@cuda.jit
def _warp_sum_kernel(x, out):
    i = cuda.grid(1)
    v = x[i]
    offset = 16
    while offset > 0:
        v += cuda.shfl_down_sync(FULL, v, offset)
        offset //= 2
    if cuda.laneid == 0:
        out[i // 32] = v


def test_warp_sum_by_shuffles_over_two_blocks():
    x = np.arange(128, dtype=np.float32)
    out = np.full(4, np.nan, dtype=np.float32)
    _warp_sum_kernel[2, 64](x, out)
    assert out.tolist() == [sum(range(k * 32, k * 32 + 32)) for k in range(4)]


@cuda.jit
def _vote_kernel(out):
    i = cuda.threadIdx.x
    lane = i % 32
    out[i, 0] = cuda.ballot_sync(FULL, lane % 3 == 0)
    out[i, 1] = cuda.all_sync(FULL, lane < 40)
    out[i, 2] = cuda.any_sync(FULL, lane == 31 and i < 32)
    out[i, 3] = cuda.all_sync(FULL, lane != 5)


def test_votes():
    out = np.zeros((64, 4), dtype=np.int64)
    _vote_kernel[1, 64](out)
    expected_ballot = sum(1 << lane for lane in range(0, 32, 3))
    assert (out[:, 0] == expected_ballot).all()
    assert (out[:, 1] == 1).all()
    assert (out[:32, 2] == 1).all() and (out[32:, 2] == 0).all()
    assert (out[:, 3] == 0).all()


@cuda.jit
def _partial_mask_kernel(out):
    i = cuda.threadIdx.x
    if i % 2 == 0:  # only even lanes take part, and the mask says so
        out[i] = cuda.shfl_sync(0x55555555, i, 4)
        out[i + 1] = cuda.ballot_sync(0x55555555, i >= 16)


def test_partial_mask_only_waits_for_lanes_in_the_mask():
    out = np.full(32, -1, dtype=np.int64)
    _partial_mask_kernel[1, 32](out)
    assert (out[0::2] == 4).all()
    assert (out[1::2] == sum(1 << lane for lane in range(16, 32, 2))).all()


@cuda.jit
def _partial_warp_kernel(out):
    i = cuda.threadIdx.x
    out[i] = cuda.shfl_xor_sync(FULL, i, 1)


def test_partial_last_warp():
    # 48 threads: warp 1 has lanes 0..15 only; the absent lanes do not take part
    out = np.full(48, -1, dtype=np.int64)
    _partial_warp_kernel[1, 48](out)
    assert out.tolist() == [i ^ 1 for i in range(48)]


@cuda.jit
def _syncwarp_kernel(out):
    buf = cuda.shared.array(32, dtype=np.int64)
    i = cuda.threadIdx.x
    buf[i] = i * 10
    cuda.syncwarp(FULL)
    out[i] = buf[(i + 1) % 32]


def test_syncwarp_orders_shared_memory_within_a_warp():
    out = np.full(32, -1, dtype=np.int64)
    _syncwarp_kernel[1, 32](out)
    assert out.tolist() == [((i + 1) % 32) * 10 for i in range(32)]


@cuda.jit
def _early_exit_kernel(out):
    i = cuda.threadIdx.x
    if i >= 20:
        return
    out[i] = cuda.shfl_down_sync(FULL, i, 1)


@pytest.mark.simulator_only
def test_a_lane_that_exited_is_an_error_not_a_hang():
    with pytest.raises(simulator.WarpDivergenceError, match="already exited"):
        _early_exit_kernel[1, 32](np.zeros(32, dtype=np.int64))


@cuda.jit
def _not_in_mask_kernel(out):
    i = cuda.threadIdx.x
    out[i] = cuda.shfl_sync(0x0000FFFF, i, 0)


@pytest.mark.simulator_only
def test_a_lane_outside_its_own_mask_is_an_error():
    with pytest.raises(simulator.WarpDivergenceError, match="does not include that lane"):
        _not_in_mask_kernel[1, 32](np.zeros(32, dtype=np.int64))


@cuda.jit
def _read_outside_mask_kernel(out):
    i = cuda.threadIdx.x
    if i < 16:
        out[i] = cuda.shfl_sync(0x0000FFFF, i, 20)


@pytest.mark.simulator_only
def test_reading_a_lane_outside_the_mask_is_an_error():
    with pytest.raises(simulator.WarpDivergenceError, match="not in the mask"):
        _read_outside_mask_kernel[1, 32](np.zeros(32, dtype=np.int64))


@pytest.mark.simulator_only
def test_shared_array_lookup_is_thread_safe():
    """Threads released together that ask for the shared array of one source line all get
    the same array (the simulator's own lookup could hand some a private copy)."""

    from numba.cuda.simulator import kernelapi

    before = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # switch threads as often as possible (the unlocked lookup
    try:  # then hands out private copies in about 1 round in 5)
        _ask_together(kernelapi)
    finally:
        sys.setswitchinterval(before)


def _ask_together(kernelapi) -> None:
    import threading

    for _ in range(40):
        shared = kernelapi.FakeCUDAShared(0)
        start = threading.Barrier(64)
        got = []

        def ask(shared=shared, start=start, got=got):
            start.wait()
            got.append(shared.array((32, 32), np.float32))  # one line for every thread

        threads = [threading.Thread(target=ask) for _ in range(64)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert len({id(a) for a in got}) == 1


# --- the block barrier (syncthreads without polling) ------------------------------------------


@cuda.jit
def _reverse_in_shared_kernel(out, stop):
    tile = cuda.shared.array(64, np.float32)
    i = cuda.threadIdx.x
    if i >= stop:  # these threads leave before the barrier: the others must not wait for them
        return
    tile[i] = i
    cuda.syncthreads()
    out[cuda.blockIdx.x, i] = tile[stop - 1 - i]
    cuda.syncthreads()
    tile[i] = -1.0


@pytest.mark.simulator_only
@pytest.mark.timeout(60)
def test_syncthreads_waits_for_every_live_thread_and_not_for_those_that_returned():
    for stop in (64, 40, 1):
        out = np.full((3, 64), np.nan, dtype=np.float32)
        before = sys.getswitchinterval()
        _reverse_in_shared_kernel[3, 64](out, stop)
        assert sys.getswitchinterval() == before  # the block's interval is restored
        expected = np.full(64, np.nan, dtype=np.float32)
        expected[:stop] = np.arange(stop)[::-1]
        np.testing.assert_array_equal(out, np.broadcast_to(expected, (3, 64)))


@cuda.jit
def _one_thread_fails_kernel(out):
    i = cuda.threadIdx.x
    if i == 7:
        out[10**6] = 1.0  # out of bounds: an IndexError in this thread only
    cuda.syncthreads()
    out[i] = i


@pytest.mark.simulator_only
@pytest.mark.timeout(60)
def test_a_thread_that_raises_stops_the_block_with_its_own_error():
    """The threads waiting at the barrier are aborted and the launch raises the failing
    thread's error (its thread and block named), not the abort of the others, and no hang."""
    before = sys.getswitchinterval()
    with pytest.raises(IndexError, match=r"tid=\[7, 0, 0\] ctaid=\[0, 0, 0\]"):
        _one_thread_fails_kernel[1, 32](np.zeros(32, dtype=np.float32))
    assert sys.getswitchinterval() == before
    out = np.zeros(32, dtype=np.float32)  # the next launch is unaffected
    _reverse_in_shared_kernel[1, 32](out.reshape(1, 32), 32)
    np.testing.assert_array_equal(out, np.arange(32)[::-1])


# --- the pool of reused threads (gpudl.simulated_blocks) ---------------------------------------


_RAN_ON: set = set()  # the interpreter threads that ran _index_kernel's simulated threads


@cuda.jit
def _index_kernel(out):
    import threading  # the simulator runs the kernel as Python: it may record its thread

    _RAN_ON.add(threading.get_ident())
    i = cuda.grid(1)
    if i < out.size:
        out[i] = i


@pytest.mark.simulator_only
@pytest.mark.timeout(60)
def test_blocks_reuse_the_pool_s_threads_and_a_kernel_that_never_waits_needs_one():
    from gpudl import simulated_blocks

    out = np.full(1000, -1, dtype=np.int64)
    _index_kernel[4, 256](out)  # warm: the pool has a worker
    _reverse_in_shared_kernel[1, 64](np.zeros((1, 64), dtype=np.float32), 64)
    before = simulated_blocks.worker_count()
    _RAN_ON.clear()
    _index_kernel[4, 256](out)  # 1024 simulated threads that never wait
    np.testing.assert_array_equal(out, np.arange(1000))
    assert len(_RAN_ON) <= 4 and threading.get_ident() not in _RAN_ON  # one per block at most
    for stop in (64, 40):  # 64 threads meeting at barriers: the pool's workers, reused
        tile = np.full((2, 64), np.nan, dtype=np.float32)
        _reverse_in_shared_kernel[2, 64](tile, stop)
        np.testing.assert_array_equal(tile[:, :stop], np.broadcast_to(
            np.arange(stop, dtype=np.float32)[::-1], (2, stop)))
    assert simulated_blocks.worker_count() == before
