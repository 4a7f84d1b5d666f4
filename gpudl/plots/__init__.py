"""The book's figures, one module per chapter, each drawn from data the package computes
(and that a notebook prints or a test checks, since nbval never compares images).

Book section: every chapter. ``gpudl.plots.<name>`` reaches every figure function, as the
labs use it; the book's build draws the deterministic ones into ``book/_generated/``
(``book/_ext/gpudl_sphinx.py``). ``gpudl.plots._style`` keeps their text readable.
"""

from gpudl.plots.ch01 import occupancy_curves, sm_diagram, time_bars
from gpudl.plots.ch02 import (
    bank_conflicts,
    hierarchy,
    memory_levels,
    roofline,
    sectors_per_request,
    warp_sectors,
)
from gpudl.plots.ch03 import linear_dataflow, matmul_tiling, tile_geometry
from gpudl.plots.ch04 import master_weight_updates, optimizer_traffic
from gpudl.plots.ch05 import (
    allreduce_bandwidth,
    bandwidth_vs_size,
    bucket_timeline,
    ddp_overlap,
    gradient_timeline,
    ring_allreduce_model,
    ring_schedule,
    ring_steps,
)
from gpudl.plots.ch06 import (
    pipeline_schedules,
    pipeline_timelines,
    state_bytes,
    tensor_parallel_split,
    zero_partition,
)
from gpudl.plots.ch07 import memory_by_zero_stage, training_time_and_cost
from gpudl.plots.ch08 import (
    attention_bytes,
    mma_fragments,
    online_softmax_tiles,
    roofline_precisions,
)
from gpudl.plots.ch09 import batching_timeline, decode_blocks, kv_cache_growth, paged_waste
from gpudl.plots.measured import rate_bars

__all__ = [
    "sm_diagram", "occupancy_curves", "time_bars", "allreduce_bandwidth",
    "ring_allreduce_model",
    "memory_levels", "warp_sectors", "bank_conflicts",
    "sectors_per_request", "roofline", "bandwidth_vs_size", "state_bytes", "hierarchy",
    "tile_geometry", "matmul_tiling", "linear_dataflow", "gradient_timeline",
    "optimizer_traffic", "master_weight_updates", "zero_partition",
    "ring_schedule", "ring_steps", "bucket_timeline", "ddp_overlap",
    "pipeline_schedules", "pipeline_timelines", "tensor_parallel_split",
    "training_time_and_cost", "memory_by_zero_stage",
    "roofline_precisions", "online_softmax_tiles", "mma_fragments", "attention_bytes",
    "kv_cache_growth", "decode_blocks", "paged_waste", "batching_timeline",
    "rate_bars",
]
