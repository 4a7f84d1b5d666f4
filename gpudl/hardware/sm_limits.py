"""What one SM offers resident blocks, and the occupancy rules of NVIDIA's calculator.

Book section: *Chapter 1, "Occupancy"*.

``SM_LIMITS`` holds each compute capability's per-SM limits (CUDA C++ Programming Guide,
"Technical Specifications per Compute Capability"); :func:`occupancy` applies the allocation
rules of ``cuda_occupancy.h`` (CUDA Toolkit) to a block size, a register count and a
shared-memory size, and says which resource limits how many blocks an SM holds at once.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpudl import backend
from gpudl.checks import check_choice, check_compute_capability, check_int

__all__ = ["SM_LIMITS", "Occupancy", "SmLimits", "occupancy"]

@dataclass(frozen=True)
class SmLimits:
    """What one SM of a compute capability offers to resident blocks (bytes for memory)."""

    max_warps: int
    max_blocks: int
    max_registers_per_block: int
    shared_memory: int  # the largest shared-memory carveout
    max_shared_memory_per_block: int  # with opt-in
    shared_memory_unit: int  # allocation granularity
    reserved_shared_memory: int  # per block, for the system (CUDA 11 and later, CC 8.0+)
    register_partitions: int = 4  # registers are split between the SM's warp schedulers
    registers: int = 65536
    register_unit: int = 256  # registers are allocated per warp, in units of 256
    max_registers_per_thread: int = 255
    max_threads_per_block: int = 1024


_K = 1024
# Programming Guide, "Technical Specifications per Compute Capability", and cuda_occupancy.h
# (shared-memory granularity 256 bytes up to 7.x and 128 from 8.0; GP100, 6.0, has two
# register partitions). Devices of 5.3 and 6.2 (Jetson TX1/Nano, TX2) allow 32 K registers
# per block.
SM_LIMITS: dict[tuple[int, int], SmLimits] = {
    (5, 0): SmLimits(64, 32, 64 * _K, 64 * _K, 48 * _K, 256, 0),
    (5, 2): SmLimits(64, 32, 64 * _K, 96 * _K, 48 * _K, 256, 0),
    (5, 3): SmLimits(64, 32, 32 * _K, 64 * _K, 48 * _K, 256, 0),
    (6, 0): SmLimits(64, 32, 64 * _K, 64 * _K, 48 * _K, 256, 0, register_partitions=2),
    (6, 1): SmLimits(64, 32, 64 * _K, 96 * _K, 48 * _K, 256, 0),
    (6, 2): SmLimits(64, 32, 32 * _K, 64 * _K, 48 * _K, 256, 0),
    (7, 0): SmLimits(64, 32, 64 * _K, 96 * _K, 96 * _K, 256, 0),
    (7, 2): SmLimits(64, 32, 64 * _K, 96 * _K, 96 * _K, 256, 0),
    (7, 5): SmLimits(32, 16, 64 * _K, 64 * _K, 64 * _K, 256, 0),
    (8, 0): SmLimits(64, 32, 64 * _K, 164 * _K, 163 * _K, 128, _K),
    (8, 6): SmLimits(48, 16, 64 * _K, 100 * _K, 99 * _K, 128, _K),
    (8, 7): SmLimits(48, 16, 64 * _K, 164 * _K, 163 * _K, 128, _K),
    (8, 9): SmLimits(48, 24, 64 * _K, 100 * _K, 99 * _K, 128, _K),
    (9, 0): SmLimits(64, 32, 64 * _K, 228 * _K, 227 * _K, 128, _K),
    (10, 0): SmLimits(64, 32, 64 * _K, 228 * _K, 227 * _K, 128, _K),
}

# Which limit to name when several allow the same number of blocks.
_LIMIT_ORDER = ("warps", "blocks", "registers", "shared_memory")


@dataclass(frozen=True)
class Occupancy:
    """How many blocks of a kernel one SM holds at once, and what stops it holding more.

    ``blocks_by_*`` are the block counts each resource alone would allow (``None``: the kernel
    uses none of it); ``limit`` names the smallest (the first of warps, blocks, registers,
    shared_memory on a tie). ``occupancy`` is active warps / the SM's maximum warps.
    """

    blocks_per_sm: int
    warps_per_sm: int
    occupancy: float
    limit: str
    warps_per_block: int
    registers_per_warp: int  # allocated, after rounding
    shared_memory_per_block: int  # allocated, after rounding, including the reserved part
    blocks_by_warps: int
    blocks_by_blocks: int
    blocks_by_registers: int
    blocks_by_shared_memory: int | None


def _round_up(x: int, unit: int) -> int:
    return -(-x // unit) * unit



def _sm_limits(compute_capability: object) -> SmLimits:
    compute_capability = check_compute_capability("compute_capability", compute_capability)
    return SM_LIMITS[check_choice("compute_capability", compute_capability, SM_LIMITS)]


def occupancy(
    threads_per_block: int,
    registers_per_thread: int,
    shared_mem_per_block: int,
    compute_capability: tuple[int, int],
) -> Occupancy:
    """Resident blocks and warps per SM for a kernel, by the CUDA occupancy calculator's rules.

    ``shared_mem_per_block`` is in bytes (static plus dynamic). The SM is assumed to give
    shared memory its largest carveout, as the driver does for a kernel that needs it.
    """
    threads = check_int("threads_per_block", threads_per_block, 1)
    regs = check_int("registers_per_thread", registers_per_thread, 1)
    smem = check_int("shared_mem_per_block", shared_mem_per_block, 0)
    sm = _sm_limits(compute_capability)
    if threads > sm.max_threads_per_block:
        raise ValueError(
            f"threads_per_block {threads} exceeds the maximum block size "
            f"{sm.max_threads_per_block}: the block cannot launch"
        )
    if regs > sm.max_registers_per_thread:
        raise ValueError(
            f"registers_per_thread {regs} exceeds the maximum {sm.max_registers_per_thread} "
            "per thread: the block cannot launch"
        )
    if smem > sm.max_shared_memory_per_block:
        raise ValueError(
            f"shared_mem_per_block {smem} bytes exceeds the per-block maximum "
            f"{sm.max_shared_memory_per_block} bytes: the block cannot launch"
        )

    warps_per_block = -(-threads // backend.WARP_SIZE)
    regs_per_warp = _round_up(regs * backend.WARP_SIZE, sm.register_unit)
    # The hardware checks a block's registers as if its warps were spread over all four
    # partitions (cuda_occupancy.h; CC 6.0 is held to the same check as 6.1 and 6.2).
    if regs_per_warp * _round_up(warps_per_block, 4) > sm.max_registers_per_block:
        raise ValueError(
            f"{threads} threads x {regs} registers need "
            f"{regs_per_warp * _round_up(warps_per_block, 4)} registers as allocated, more "
            f"than the {sm.max_registers_per_block} a block may have: the block cannot launch"
        )
    # Each partition holds whole warps: warps per SM = partitions x floor(its registers / a
    # warp's registers).
    per_partition = sm.registers // sm.register_partitions
    warps_by_registers = per_partition // regs_per_warp * sm.register_partitions
    smem_per_block = _round_up(smem + sm.reserved_shared_memory, sm.shared_memory_unit)

    by_limit = {
        "warps": sm.max_warps // warps_per_block,
        "blocks": sm.max_blocks,
        "registers": warps_by_registers // warps_per_block,
        "shared_memory": sm.shared_memory // smem_per_block if smem_per_block else None,
    }
    blocks = min(n for n in by_limit.values() if n is not None)
    limit = next(name for name in _LIMIT_ORDER if by_limit[name] == blocks)
    warps = blocks * warps_per_block
    return Occupancy(
        blocks_per_sm=blocks,
        warps_per_sm=warps,
        occupancy=warps / sm.max_warps,
        limit=limit,
        warps_per_block=warps_per_block,
        registers_per_warp=regs_per_warp,
        shared_memory_per_block=smem_per_block,
        blocks_by_warps=by_limit["warps"],
        blocks_by_blocks=by_limit["blocks"],
        blocks_by_registers=by_limit["registers"],
        blocks_by_shared_memory=by_limit["shared_memory"],
    )
