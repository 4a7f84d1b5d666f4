"""gpudl.hardware: device facts, the GPU spec table, and the occupancy rules."""

import dataclasses
import re
from pathlib import Path

import pytest

from gpudl.hardware import (
    FP32_CORES_PER_SM,
    SM_LIMITS,
    SPECS,
    DeviceInfo,
    describe,
    occupancy,
    spec,
)

BIB = Path(__file__).resolve().parents[1] / "book" / "references.bib"
KIB = 1024



# ---------------------------------------------------------------------------------------------
# describe()
# ---------------------------------------------------------------------------------------------


@pytest.mark.simulator_only
def test_describe_on_the_simulator_reports_no_device():
    info = describe()
    assert info.backend == "simulator"
    assert "simulator" in info.name.lower()
    assert info.warp_size == 32
    # The simulator's fake compute capability (5, 2) must not be passed on as a fact.
    assert info.compute_capability is None
    unknown = [
        f.name for f in dataclasses.fields(info)
        if f.name not in ("backend", "name", "warp_size")
    ]
    assert all(getattr(info, name) is None for name in unknown)
    text = info.summary()
    assert text.splitlines()[0] == info.name
    assert "unknown (simulator)" in text
    assert "32 threads" in text


def test_peaks_are_derived_from_the_driver_facts():
    # An A100-SXM4-40GB as the driver describes it (deviceQuery: 108 SMs, 1410 MHz, memory
    # clock 1215 MHz, 5120-bit bus). 2 x 1215e6 x 5120 / 8 = 1555.2 GB/s and
    # 108 x 64 x 2 x 1.41e9 = 19.49 TFLOP/s: the datasheet's 1,555 GB/s and 19.5 TFLOPS.
    info = DeviceInfo(
        backend="cuda", name="NVIDIA A100-SXM4-40GB", compute_capability=(8, 0),
        sm_count=108, fp32_cores_per_sm=64, warp_size=32,
        memory_clock_khz=1_215_000, memory_bus_width_bits=5120, sm_clock_khz=1_410_000,
    )
    assert info.peak_memory_bandwidth_gbs == pytest.approx(1555.2)
    assert info.peak_fp32_tflops == pytest.approx(19.49, abs=0.01)
    a100 = spec("A100 40GB SXM")
    assert info.peak_memory_bandwidth_gbs == pytest.approx(a100.memory_bandwidth_gbs, rel=1e-3)
    assert info.peak_fp32_tflops == pytest.approx(a100.fp32_tflops, rel=1e-2)
    assert "1555.2 GB/s" in info.summary()
    assert "unknown (not reported by the driver)" in info.summary()  # e.g. the L2 size


def test_peaks_stay_unknown_without_clocks():
    # CUDA 13 drivers may not report the clocks: then nothing is derived from them.
    info = DeviceInfo(backend="cuda", name="x", sm_count=132, fp32_cores_per_sm=128,
                      memory_bus_width_bits=5120)
    assert info.peak_fp32_tflops is None
    assert info.peak_memory_bandwidth_gbs is None


def test_device_info_is_frozen():
    with pytest.raises(dataclasses.FrozenInstanceError):
        describe().name = "other"


@pytest.mark.gpu
@pytest.mark.gpu
def test_describe_on_a_gpu_reads_the_driver():
    info = describe()
    assert info.backend == "cuda"
    assert info.name and "simulator" not in info.name.lower()
    assert info.compute_capability is not None and info.compute_capability >= (5, 0)
    assert info.sm_count > 0 and info.warp_size == 32
    for name in ("max_threads_per_block", "max_threads_per_sm", "max_shared_memory_per_block",
                 "max_shared_memory_per_sm", "registers_per_sm", "l2_cache_bytes",
                 "memory_bytes", "memory_bus_width_bits"):
        assert getattr(info, name) > 0, name
    if info.compute_capability in FP32_CORES_PER_SM:
        assert info.fp32_cores_per_sm == FP32_CORES_PER_SM[info.compute_capability]
    # The occupancy table must agree with what this driver says about its own SMs.
    limits = SM_LIMITS.get(info.compute_capability)
    if limits is not None:
        assert info.max_threads_per_sm == limits.max_warps * 32
        assert info.max_blocks_per_sm == limits.max_blocks
        assert info.registers_per_sm == limits.registers
        assert info.registers_per_block == limits.max_registers_per_block
        assert info.max_shared_memory_per_sm == limits.shared_memory
        assert info.max_shared_memory_per_block_optin == limits.max_shared_memory_per_block
    print(info.summary())


# ---------------------------------------------------------------------------------------------
# SPECS
# ---------------------------------------------------------------------------------------------


def bib_keys() -> set[str]:
    return set(re.findall(r"^@\w+\{([^,\s]+),", BIB.read_text(), flags=re.MULTILINE))


def test_specs_cover_the_gpus_the_book_discusses():
    for name in ("GTX 580 3GB", "V100 SXM2 32GB", "A100 40GB SXM", "A100 80GB SXM", "H100 SXM",
                 "H200 SXM", "RTX A6000", "RTX 4090", "L4", "Jetson Nano"):
        assert spec(name).name == name


@pytest.mark.parametrize("name", list(SPECS))
def test_spec_is_self_consistent(name):
    s = SPECS[name]
    assert s.cuda_cores == s.sm_count * s.fp32_cores_per_sm
    assert s.fp32_cores_per_sm == FP32_CORES_PER_SM[s.compute_capability]
    assert all(key in bib_keys() for key in s.source.split(",")), f"{s.source} not in {BIB}"
    # Tensor cores do at least twice the FP32 rate (exactly twice on the RTX 4090 with FP32
    # accumulation); bf16 needs tensor cores.
    if s.fp16_tensor_tflops is not None:
        assert s.fp16_tensor_tflops >= 2 * s.fp32_tflops
    if s.bf16_tflops is not None:
        assert s.fp16_tensor_tflops is not None
    assert 0 < s.memory_bandwidth_gbs and 0 < s.memory_gb and 0 < s.tdp_watts


def test_bib_keys_are_unique():
    keys = re.findall(r"^@\w+\{([^,\s]+),", BIB.read_text(), flags=re.MULTILINE)
    assert len(keys) == len(set(keys))


def test_claim_c2_a100_has_6912_cores_not_80():
    # The source article says an A100 has 80 CUDA cores. It has 108 SMs of 64 FP32 cores;
    # 80 is the V100's SM count.
    a100 = spec("A100 80GB SXM")
    assert (a100.sm_count, a100.fp32_cores_per_sm, a100.cuda_cores) == (108, 64, 6912)
    assert spec("V100 SXM2 32GB").sm_count == 80
    assert spec("H100 SXM").cuda_cores == 16896


def test_claim_c4_rtx_a6000_has_48_gb():
    a6000 = spec("RTX A6000")
    assert (a6000.memory_gb, a6000.memory_bandwidth_gbs, a6000.cuda_cores) == (48, 768, 10752)


def test_bf16_only_where_tensor_cores_support_it():
    assert spec("V100 SXM2 32GB").bf16_tflops is None  # Volta: fp16 tensor cores only
    assert spec("GTX 580 3GB").fp16_tensor_tflops is None
    assert spec("H100 SXM").bf16_tflops == 989.0  # dense: half the datasheet's sparse 1,979


def test_h200_is_an_h100_with_more_and_faster_memory():
    h100, h200 = spec("H100 SXM"), spec("H200 SXM")
    assert (h200.sm_count, h200.fp32_tflops, h200.bf16_tflops) == (
        h100.sm_count, h100.fp32_tflops, h100.bf16_tflops)
    assert h200.memory_gb > h100.memory_gb and h200.memory_bandwidth_gbs > h100.memory_bandwidth_gbs


def test_unknown_spec_lists_the_known_names():
    with pytest.raises(ValueError, match="A100 40GB SXM") as err:
        spec("A100")
    assert "'A100'" in str(err.value)


# ---------------------------------------------------------------------------------------------
# occupancy()
# ---------------------------------------------------------------------------------------------


def test_occupancy_full_when_threads_are_the_limit():
    # CC 8.0: 256 threads = 8 warps. 32 registers -> 1024 per warp (already a multiple of 256),
    # 16384 per partition / 1024 = 16 warps, x 4 partitions = 64 warps -> 8 blocks; the SM holds
    # 64 warps -> 8 blocks too. Tie: the warp limit is named. 8 x 8 = 64 warps, occupancy 1.
    occ = occupancy(256, 32, 0, (8, 0))
    assert (occ.blocks_per_sm, occ.warps_per_sm, occ.occupancy, occ.limit) == (8, 64, 1.0, "warps")
    assert (occ.blocks_by_warps, occ.blocks_by_registers) == (8, 8)


def test_occupancy_halved_by_registers():
    # 64 registers -> 2048 per warp; 16384 / 2048 = 8 warps per partition, 32 per SM -> 4 blocks
    # of 8 warps = 32 warps of 64: occupancy 0.5.
    occ = occupancy(256, 64, 0, (8, 0))
    assert (occ.blocks_per_sm, occ.warps_per_sm, occ.occupancy, occ.limit) == (
        4, 32, 0.5, "registers")
    assert occ.registers_per_warp == 2048


def test_occupancy_limited_by_shared_memory():
    # 48 KB + 1 KB reserved = 49 KB per block (a multiple of 128 bytes);
    # floor(164 KB / 49 KB) = 3 blocks = 24 warps of 64: 0.375.
    occ = occupancy(256, 32, 48 * KIB, (8, 0))
    assert (occ.blocks_per_sm, occ.warps_per_sm, occ.occupancy, occ.limit) == (
        3, 24, 0.375, "shared_memory")
    assert occ.shared_memory_per_block == 49 * KIB


def test_occupancy_shared_memory_rounds_up_to_the_allocation_unit():
    # CC 8.0: 1 byte + 1 KB reserved rounds up to 1152 bytes (128-byte units):
    # floor(167936 / 1152) = 145 blocks by shared memory; the 32-block limit still wins.
    occ = occupancy(32, 16, 1, (8, 0))
    assert occ.shared_memory_per_block == 1152
    assert occ.blocks_by_shared_memory == 145
    # CC 7.0: no reservation, 256-byte units: 40,000 bytes -> 40,192; floor(98304 / 40192) = 2.
    occ = occupancy(128, 32, 40_000, (7, 0))
    assert (occ.shared_memory_per_block, occ.blocks_per_sm, occ.limit) == (
        40_192, 2, "shared_memory")


def test_occupancy_tiny_blocks_hit_the_block_limit():
    # 32 threads = 1 warp per block; CC 8.0 holds at most 32 blocks -> 32 warps of 64: 0.5.
    occ = occupancy(32, 32, 0, (8, 0))
    assert (occ.blocks_per_sm, occ.warps_per_sm, occ.occupancy, occ.limit) == (
        32, 32, 0.5, "blocks")


def test_occupancy_turing_holds_32_warps():
    # CC 7.5: 1024 threads per SM, so one 1024-thread block fills it; 16 blocks at most, so
    # 32-thread blocks reach only 16 of 32 warps.
    occ = occupancy(1024, 32, 0, (7, 5))
    assert (occ.blocks_per_sm, occ.warps_per_sm, occ.occupancy, occ.limit) == (1, 32, 1.0, "warps")
    occ = occupancy(32, 32, 0, (7, 5))
    assert (occ.blocks_per_sm, occ.occupancy, occ.limit) == (16, 0.5, "blocks")


def test_occupancy_matches_nvidia_best_practices_guide():
    # Best Practices Guide, "Calculating Occupancy": on compute capability 7.0, 37 registers per
    # thread give 75% occupancy with 12 resident 128-thread blocks, and 63% with four
    # 320-thread blocks. By hand: 37 x 32 = 1184 -> 1280 registers per warp;
    # 16384 // 1280 = 12 warps per partition, 48 per SM; 48 // 4 = 12 blocks (48/64 = 0.75);
    # 48 // 10 = 4 blocks (40/64 = 0.625).
    occ = occupancy(128, 37, 0, (7, 0))
    assert (occ.blocks_per_sm, occ.occupancy, occ.limit) == (12, 0.75, "registers")
    occ = occupancy(320, 37, 0, (7, 0))
    assert (occ.blocks_per_sm, round(occ.occupancy, 2), occ.limit) == (4, 0.62, "registers")
    assert occ.occupancy == pytest.approx(0.63, abs=0.01)


def test_occupancy_registers_are_granted_whole_warps_per_partition():
    # 200 registers -> 6400 per warp. A plain division of the register file would allow
    # 65536 // 6400 = 10 one-warp blocks; each of the 4 partitions holds only 16384 // 6400 = 2
    # warps, so 8 fit (the calculator's warp-granular rule).
    occ = occupancy(32, 200, 0, (9, 0))
    assert (occ.blocks_by_registers, occ.blocks_per_sm, occ.limit) == (8, 8, "registers")


def test_occupancy_hopper_and_ada():
    # CC 9.0: 228 KB per SM, 227 KB per block at most: a 100 KB block (+1 KB) fits twice.
    assert occupancy(128, 32, 100 * KIB, (9, 0)).blocks_per_sm == 2
    # CC 8.9: 48 warps and 24 blocks per SM; 64-thread blocks: 24 blocks x 2 warps = 48 warps.
    occ = occupancy(64, 32, 0, (8, 9))
    assert (occ.blocks_per_sm, occ.occupancy, occ.limit) == (24, 1.0, "warps")


@pytest.mark.parametrize("cc", list(SM_LIMITS))
def test_occupancy_is_a_fraction_on_every_supported_capability(cc):
    for threads, regs, smem in [(32, 16, 0), (128, 40, 4000), (1024, 32, 0), (96, 255, 0)]:
        occ = occupancy(threads, regs, smem, cc)
        assert 0 < occ.occupancy <= 1
        assert occ.warps_per_sm == occ.blocks_per_sm * occ.warps_per_block
        assert occ.blocks_per_sm == min(
            n for n in (occ.blocks_by_warps, occ.blocks_by_blocks, occ.blocks_by_registers,
                        occ.blocks_by_shared_memory) if n is not None)


@pytest.mark.parametrize(
    "args, message",
    [
        ((1025, 32, 0, (8, 0)), "maximum block size 1024"),
        ((256, 256, 0, (8, 0)), "maximum 255 per thread"),
        ((256, 32, 164 * KIB, (8, 0)), "per-block maximum 166912"),
        ((256, 32, 49 * KIB, (6, 1)), "per-block maximum 49152"),
        ((1024, 128, 0, (8, 0)), "more than the 65536 a block"),  # 1024 x 128 = 131072
        ((1024, 48, 0, (5, 3)), "32768 a block may have"),  # Jetson Nano: 32 K per block
        ((0, 32, 0, (8, 0)), "threads_per_block must be >= 1"),
        ((256, 0, 0, (8, 0)), "registers_per_thread must be >= 1"),
        ((256, 32, -1, (8, 0)), "shared_mem_per_block must be >= 0"),
        ((256, 32, 0, (3, 5)), r"compute_capability must be one of \[\(5, 0\)"),
        ((256, 32, 0, (12, 0)), r"must be one of .*, got \(12, 0\)"),
    ],
)
def test_occupancy_rejects_what_cannot_launch(args, message):
    with pytest.raises(ValueError, match=message):
        occupancy(*args)


@pytest.mark.parametrize(
    "args",
    [
        (256.0, 32, 0, (8, 0)),
        (256, "32", 0, (8, 0)),
        (256, 32, None, (8, 0)),
        (True, 32, 0, (8, 0)),
        (256, 32, 0, 8.0),
        (256, 32, 0, "8.0"),
        (256, 32, 0, (8,)),
        (256, 32, 0, (8.0, 0)),
    ],
)
def test_occupancy_rejects_wrong_types(args):
    with pytest.raises(TypeError, match="must be"):
        occupancy(*args)


def test_datasheet_number_formats_like_a_datasheet():
    from gpudl.hardware import datasheet_number

    assert [datasheet_number(v) for v in (0.236, 19.5, 1555.0, 3350.0, 154.8, None)] == [
        "0.236", "19.5", "1,555", "3,350", "154.8", "none"]
