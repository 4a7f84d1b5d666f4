"""gpudl.kernels.grid: the indices each thread sees, and the blocks a launch needs."""

import numpy as np
import pytest

from gpudl.kernels import grid


def test_thread_ids_match_the_index_formulas():
    rows = grid.thread_ids(3, 40)
    block, thread, index, warp, lane = rows.T
    assert rows.shape == (120, 5)
    assert (index == np.arange(120)).all()
    assert (index == block * 40 + thread).all()
    assert (warp == thread // 32).all() and (lane == thread % 32).all()
    assert sorted(set(block.tolist())) == [0, 1, 2]


@pytest.mark.parametrize(("args", "error"), [((0, 32), ValueError), ((1, 0), ValueError),
                                             ((1, 1025), ValueError), ((1.5, 32), TypeError)])
def test_thread_ids_rejects_bad_launches(args, error):
    with pytest.raises(error):
        grid.thread_ids(*args)


def test_resident_blocks_reads_device_attributes_the_driver_has(monkeypatch):
    # On a GPU, numba reads device.NAME as CU_DEVICE_ATTRIBUTE_NAME from cuda.bindings: a
    # misspelt NAME only fails there. Check the names against the bindings' enum here.
    from cuda.bindings import driver

    known = {n.removeprefix("CU_DEVICE_ATTRIBUTE_") for n in dir(driver.CUdevice_attribute)}

    class FakeDevice:
        def __getattr__(self, name):
            if name not in known:
                raise AttributeError(f"no device attribute {name}")
            return {"MULTIPROCESSOR_COUNT": 132, "MAX_THREADS_PER_MULTIPROCESSOR": 2048}[name]

    monkeypatch.setattr(grid.backend, "is_simulator", lambda: False)
    monkeypatch.setattr(grid.cuda, "get_current_device", FakeDevice, raising=False)
    grid._resident_blocks.cache_clear()
    try:
        assert grid.grid_stride_blocks(10**9, 256) == 132 * 8
        assert grid.grid_stride_blocks(1000, 256) == 4
        assert grid.grid_stride_blocks(10**9, 256, maximum=2) == 2
        assert grid.grid_stride_blocks(10**9, 256, maximum=10**6) == 132 * 8
    finally:
        grid._resident_blocks.cache_clear()


def test_blocks_to_cover_caps_at_maximum_and_tiles_cover_a_matrix():
    assert grid.blocks_to_cover(1000, 256) == 4
    assert grid.blocks_to_cover(1000, 256, maximum=3) == 3
    assert grid.blocks_to_cover(0, 256, maximum=3) == 0
    assert grid.tiles_to_cover((33, 64), 32) == (2, 2)
    assert grid.tiles_to_cover((1, 70), 32) == (3, 1)
