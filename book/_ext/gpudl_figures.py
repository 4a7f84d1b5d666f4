"""The book's model figures: what draws each one (deterministic, from `gpudl.plots` and the
package's models), drawn into book/_generated/ in English and in Chinese (`gpudl_figure_text`).

The Sphinx extension (`gpudl_sphinx`) draws them when a build starts; `make book` draws them
once, before building both editions side by side:

    python book/_ext/gpudl_figures.py          # `make figures`

A figure's text with no Chinese translation is a warning of the build (an error of the
command): run `make po`, then translate it in locales/zh_CN/figures.po."""

import logging
import sys
from collections.abc import Collection
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

GENERATED = Path(__file__).resolve().parents[1] / "_generated"


def tile_reads() -> dict:
    """The transpose tiles of Chapter 2 (``gpudl.kernels.transpose``: ``TILE`` rows, ``TILE``
    and ``PADDED`` words wide) with the words the first warp's column read asks for, traced
    on the simulator (``access_patterns.tile_load_requests``)."""
    from gpudl.kernels import access_patterns, transpose
    from gpudl.trace import on_simulator

    words = on_simulator(access_patterns.tile_load_requests)
    return {"v2_shared": {"rows": transpose.TILE, "width": transpose.TILE,
                          "read": words["shared"]},
            "v3_padded": {"rows": transpose.TILE, "width": transpose.PADDED,
                          "read": words["padded"]}}


def reduction_block() -> tuple[int, int]:
    """The threads of a block of ``gpudl.kernels.reduction`` and the warp size."""
    from gpudl.kernels import reduction

    return reduction.THREADS_PER_BLOCK, reduction.WARP


def traced_block_loads() -> dict:
    """For ``copy_v2_k_loads`` and ``copy_v3_vector4`` (``gpudl.kernels.memory``), the
    elements each thread of a block loads from ``x``, load by load, traced on the simulator
    on one block's share of an array (``K`` or ``VECTORS * WIDTH`` elements per thread):
    a name -> per thread, per load, its element indices (a 16-byte load is 4 of them)."""
    import numpy as np

    from gpudl.kernels import memory
    from gpudl.trace import trace

    loads = {}
    for kernel, per_load, per_thread in (
            (memory.copy_v2_k_loads, 1, memory.K),
            (memory.copy_v3_vector4, memory.WIDTH, memory.VECTORS * memory.WIDTH)):
        n = per_thread * memory.THREADS_PER_BLOCK
        x, out = np.arange(n, dtype=np.float32), np.full(n, np.nan, dtype=np.float32)
        accesses = trace(kernel, 1, memory.THREADS_PER_BLOCK, x, out).accesses
        base = 1 << 32  # the tracer's address of argument 0, x
        elements: list[list[int]] = [[] for _ in range(memory.THREADS_PER_BLOCK)]
        for a in accesses:
            if a.array == "x" and a.op == "load":
                elements[a.thread].append((a.address - base) // a.size)
        loads[kernel.py_func.__name__] = [
            [sorted(mine)[i:i + per_load] for i in range(0, len(mine), per_load)]
            for mine in elements]
    return loads


def _model_figures() -> dict:
    from gpudl import plots
    from gpudl.estimate import KERNEL_INTENSITY, model_state_memory, training_flops
    from gpudl.hardware import SPECS, peak_flops
    from gpudl.kernels import access_patterns
    from gpudl.parallel.data import Setup
    from gpudl.parallel.one_process import ZERO_DIMS
    from gpudl.plots.style import finish
    from gpudl.trace import on_simulator

    h100 = SPECS["H100 SXM"]
    a100 = "A100 80GB SXM"
    return {
        # Chapter 1
        "sm-cc90.png": lambda: plots.sm_diagram((9, 0)),
        "occupancy-cc80.png": lambda: plots.occupancy_curves((8, 0)),
        # Chapter 2 (the Hopper whitepaper's 50 MB of L2, cited in the chapter's table)
        "memory-levels-h100.png": lambda: plots.memory_levels("H100 SXM", l2_mb=50),
        "warp-sectors.png": lambda: plots.warp_sectors(
            on_simulator(access_patterns.copy_requests)),
        "bank-conflicts.png": lambda: plots.bank_conflicts(
            on_simulator(access_patterns.tile_load_requests)),
        "transpose-tile-banks.png": lambda: plots.tile_banks(tile_reads()),
        "reduction-stages.png": lambda: plots.reduction_stages(*reduction_block()),
        "block-loads.png": lambda: plots.block_loads(on_simulator(traced_block_loads)),
        "roofline-h100.png": lambda: plots.roofline(
            h100.fp32_tflops * 1e12, h100.memory_bandwidth_gbs * 1e9,
            {name: (i, None) for name, i in KERNEL_INTENSITY.items()},
            "Roofline, FP32, H100 SXM (datasheet)",
        ),
        # Chapter 3 (the data layouts traced on the simulator)
        "matmul-warp-footprint.png": lambda: plots.warp_footprints(
            [on_simulator(plots.warp_footprint, v) for v in ("v1_naive", "v2_coalesced")]),
        "matmul-tiling.png": plots.matmul_tiling,
        "matmul-register-tile.png": lambda: plots.register_tile(
            on_simulator(plots.thread_registers)),
        "linear-dataflow.png": lambda: plots.linear_dataflow(32, 64, 32),
        **_ch04_figures(),
        # Chapter 5 (the model's and the timeline's inputs are assumptions, stated in the
        # captions)
        "ring-model.png": lambda: plots.ring_allreduce_model(
            1e9, 400, 10e-6, [2, 4, 8, 16, 32, 64, 128, 256]
        ),
        "ring-steps.png": lambda: plots.ring_steps(4),
        "ddp-overlap.png": lambda: plots.ddp_overlap(0.15, 100e6, 4, 2e9, 50e-6, (1, 4)),
        # the lab's MLP and bucket cap (the defaults of gpudl.parallel.data.Setup)
        "gradient-buckets.png": lambda: plots.gradient_buckets(Setup.dims,
                                                               Setup.bucket_cap_mb),
        # Chapter 6
        "pipeline-schedules.png": lambda: finish(plots.pipeline_schedules(4, 4)),
        "tensor-parallel.png": lambda: plots.tensor_parallel_split(32, 64, 2),
        "zero-partition.png": lambda: plots.zero_partition(4),
        "zero-shards.png": lambda: plots.zero_shards(ZERO_DIMS, 4),
        # Chapter 7
        "training-time-cost.png": lambda: plots.training_time_and_cost(
            training_flops(1e9, 20.2e9), peak_flops(a100, "bf16"), a100, claimed=(4, 18)),
        "zero-memory.png": lambda: plots.memory_by_zero_stage(
            {"1B parameters, 4 GPUs": [model_state_memory(1e9, n_gpus=4, zero_stage=s) / 1e9
                                       for s in range(4)],
             "7.5B parameters, 64 GPUs": [model_state_memory(7.5e9, n_gpus=64, zero_stage=s)
                                          / 1e9 for s in range(4)]},
            {name: SPECS[name].memory_gb for name in ("V100 SXM2 32GB", "RTX A6000", a100)}),
    }


def _ch04_figures() -> dict:
    """Chapter 4's figures: each Adam variant's error against its bound, what one thread of
    the fused and shared-memory steps touches, one multi-tensor launch over the flat buffers
    of Chapter 3's MLP, the bytes per variant (two parameter tensors are enough: the counts
    are per parameter), the master weight and its bfloat16 rounding."""
    from gpudl import plots
    from gpudl.models import KernelMLP
    from gpudl.optim import traffic_table
    from gpudl.plots.ch04 import weight_after_updates
    from gpudl.trace import on_simulator

    n, step = 256, 3
    mlp = KernelMLP((64, 32, 10))
    shapes = [tuple(p.shape) for p in mlp.params.values()]
    return {
        "adam-error-bound.png": lambda: plots.error_within_bound(
            plots.adam_error_ratios(n, step),
            f"Adam, step {step}, {n} parameters: the largest error of each"),
        "adam-thread-work.png": lambda: plots.adam_thread_work(
            [on_simulator(plots.adam_thread_footprint, v) for v in ("v2_fused", "v3_shared")]),
        "adam-multi-tensor.png": lambda: plots.multi_tensor_layout(
            on_simulator(plots.grid_stride_layout, shapes), list(mlp.params),
            f"One v4_multi_tensor launch over the MLP {mlp.sizes} of Chapter 3"),
        "adam-traffic.png": lambda: plots.optimizer_traffic(
            on_simulator(traffic_table, (40, 13))),
        "master-weight.png": lambda: plots.master_weight_updates(100, -1e-3),
        "bf16-rounding.png": lambda: plots.bf16_bits(on_simulator(
            plots.bf16_rounding, weight_after_updates(100, -1e-3)["float32"][-1])),
    }


def _ch08_figures() -> dict:
    """Chapter 8's figures: the roofline with the BF16 roof, the tiles of online softmax and
    one row's running maximum and sum, the mma fragment layout, the bytes of the attention
    variants (formula, proven equal to the traced counts by tests/test_attention.py), their
    largest errors against the bound, and what one block and one thread (or warp) of each
    kernel reads and writes, traced on the simulator."""
    import numpy as np

    from gpudl import plots
    from gpudl.hardware import SPECS
    from gpudl.kernels import attention, mma
    from gpudl.kernels import matmul as matmul_kernels
    from gpudl.plots.ch08_layouts import MARKED
    from gpudl.solutions.ch03 import tile_intensity
    from gpudl.trace import on_simulator

    h100 = SPECS["H100 SXM"]
    s_long, heads, d = 4096, 16, 64

    def attention_intensity(variant: str) -> float:
        flops = 4 * heads * d * s_long**2
        return flops / sum(attention.traffic(variant, heads, s_long, d).values())

    points = {
        "v1/v2 naive matmul": (0.25, "FP32"),
        "v3 tiled": (tile_intensity(matmul_kernels.TILE, matmul_kernels.TILE), "FP32"),
        "v4 1-D registers": (tile_intensity(matmul_kernels.V4_BM, matmul_kernels.V4_BN), "FP32"),
        "v5 2-D registers": (tile_intensity(matmul_kernels.V5_BM, matmul_kernels.V5_BN), "FP32"),
        "attention v1, s=4096": (attention_intensity("v1_three_kernels"), "FP32"),
        "attention v2 fused, s=4096": (attention_intensity("v2_fused"), "FP32"),
        # a 64 x 64 tile of bf16 words per 16 of K: 2 * 64 * 64 * 16 flops, 2 * 128 * 16 B
        "tensor-core v2 tile (bf16)": (2 * 64 * 64 / (2 * 128), "BF16"),
    }
    s_values = [2**p for p in range(7, 15)]
    fragments = {"A (16 x 16, bf16)": "a", "B (16 x 8, bf16)": "b",
                 "C and D (16 x 8, fp32)": "c"}
    cases = [(17, 5, False, 1.0), (20, 17, True, 1.0), (24, 64, False, 1.0),
             (18, 128, True, 8.0), (24, 20, False, 4.0)]
    return {
        "roofline-bf16-h100.png": lambda: plots.roofline_precisions(
            {"FP32": h100.fp32_tflops * 1e12, "TF32": h100.tf32_tflops * 1e12,
             "BF16": h100.bf16_tflops * 1e12}, h100.memory_bandwidth_gbs * 1e9, points,
            "Roofline, H100 SXM (datasheet): FP32, TF32 and BF16 roofs"),
        "online-softmax-tiles.png": lambda: plots.online_softmax_tiles(
            100, attention.TILE, causal=True),
        "mma-fragments.png": lambda: plots.mma_fragments(
            {name: mma.lanes(matrix) for name, matrix in fragments.items()},
            {name: plots.fragment_registers(matrix) for name, matrix in fragments.items()}),
        # the lab's row of online softmax (np.random.default_rng(1), 40 scores)
        "online-softmax-row.png": lambda: plots.online_softmax_row(
            np.random.default_rng(1).standard_normal(40) * 3, attention.TILE),
        "attention-v1-threads.png": lambda: plots.kernel_footprints(
            on_simulator(plots.attention_footprints, "v1_three_kernels", 36, 16),
            "v1, s = 36, d = 16: one block and one thread of each kernel"),
        "attention-v2-threads.png": lambda: plots.kernel_footprints(
            on_simulator(plots.attention_footprints, "v2_fused", 24, 32),
            f"v2_fused, s = 24, d = 32: block 0, thread {MARKED}"),
        "tensor-core-warps.png": lambda: plots.kernel_footprints(
            [panel for variant in ("v1_warp_tiles", "v2_shared_tiles")
             for panel in on_simulator(plots.tensor_core_footprints, variant)],
            "The tensor-core matmuls, one step of K: what one warp reads and writes",
            unit="warp"),
        # sizes like those of tests/test_attention.py: not multiples of the tile, causal and
        # not, a large head with large scores
        "attention-error.png": lambda: plots.attention_errors(
            [f"s = {s}\nd = {d}" + ("\ncausal" if causal else "")
             + (f"\nq x {scale:g}" if scale != 1 else "") for s, d, causal, scale in cases],
            on_simulator(plots.observed_errors, cases),
            "Float32 attention on the simulator, and torch's SDPA:\n"
            "the largest error over its bound"),
        "attention-bytes.png": lambda: plots.attention_bytes(
            s_values, {v: [sum(attention.traffic(v, heads, s, d).values()) for s in s_values]
                       for v in attention.VARIANTS},
            title=f"Attention, {heads} heads of d = {d}, FP32: bytes per variant"),
    }


def _ch09_figures() -> dict:
    """Chapter 9's figures, all from deterministic models: the roofline of prefill and
    decode, the KV cache against a GPU's memory, who holds and reads what in a decode block
    (from the kernel's own constants), the blocks each decode variant launches,
    the paged cache's waste and batching on the seeded stream the lab replays (whose
    numbers the chapter glues from the lab)."""
    import numpy as np

    from gpudl import plots
    from gpudl.estimate import (
        MODELS,
        POLICIES,
        StepCost,
        decode_intensity,
        kv_cache_bytes,
        prefill_intensity,
        request_stream,
        simulate,
    )
    from gpudl.hardware import SPECS
    from gpudl.kernels import decode, decode_tile, paged
    from gpudl.trace import BANKS

    h100, llama7, llama70 = SPECS["H100 SXM"], MODELS["Llama 2 7B"], MODELS["Llama 2 70B"]
    peak, bandwidth = h100.bf16_tflops * 1e12, h100.memory_bandwidth_gbs * 1e9
    kv7 = llama7.kv_bytes_per_token()
    points = {f"decode b={b}": (decode_intensity(7e9, b), "BF16") for b in (1, 16, 256)}
    points["decode b=16, 1,024 tokens cached"] = (
        decode_intensity(7e9, 16, 16 * 1024, kv7), "BF16")
    points["decode b=1, int8 weights"] = (decode_intensity(7e9, 1, bytes_per_param=1), "BF16")
    points["prefill s=512"] = (prefill_intensity(7e9, 512, kv7), "BF16")
    tokens = [2**p for p in range(10, 21)]
    caches = {f"{m.name} ({m.kv_heads} KV heads)": [kv_cache_bytes(
        m.layers, m.kv_heads, m.head_dim, t) for t in tokens] for m in (llama7, llama70)}
    caches["Llama 2 70B with 64 KV heads"] = [kv_cache_bytes(80, 64, 128, t) for t in tokens]
    lengths = [2**p for p in range(7, 18)]
    blocks = {"v1_one_block_per_head": [32] * len(lengths),
              "v2_split_kv": [32 * -(-s // decode.GPU_SPLIT_SIZE) for s in lengths]}
    requests = request_stream(200, 32.0, seed=0)
    block_sizes = (8, 16, 32, 64)
    waste = [paged.measure_waste(requests, b, 2048, 0.02) for b in block_sizes]
    cost = StepCost(7e9, peak, bandwidth, kv7)
    return {
        "roofline-decode-h100.png": lambda: plots.roofline_precisions(
            {"BF16": peak}, bandwidth, points,
            "A 7B model in bf16 on an H100 SXM (datasheet roofline)"),
        "kv-cache-llama2.png": lambda: plots.kv_cache_growth(
            tokens, caches, {"80 GB (H100)": 80e9, "141 GB (H200)": 141e9},
            "The KV cache in fp16, all sequences together"),
        # the kernel's own layout: a block of TILE threads, COLUMNS head dimensions each, a
        # TILE x TILE_PADDED tile of float32 partial scores, shared memory's BANKS banks
        "decode-layout.png": lambda: plots.decode_layout(
            decode_tile.TILE, decode_tile.COLUMNS, decode_tile.TILE_PADDED, BANKS,
            np.dtype(np.float32).itemsize),
        "decode-blocks.png": lambda: plots.decode_blocks(
            lengths, blocks, h100.sm_count, "Decode attention, batch 1, 32 heads"),
        "paged-waste.png": lambda: plots.paged_waste(
            block_sizes, [w["paged_waste"] for w in waste], waste[0]["contiguous_waste"],
            "KV-cache positions reserved but empty, 200 requests"),
        "batching.png": lambda: plots.batching_timeline(
            [simulate(requests, cost, 32, p) for p in POLICIES], 32,
            "200 requests at 32 per second, batches of at most 32 (cost model)"),
    }


def _ch11_figures() -> dict:
    """Chapter 11's figures: the expert loads of the chapter's two routers on one group of 64
    tokens (the lab prints the same counts), the rows of one layer on two ranks through its
    two all-to-alls, ring attention's steps, a ring step on an H100 at a chunk that hides its
    transfer and one that does not (the cost model, at the benchmark's 16 heads of 128), the
    causal work per rank in the two layouts, and the groups of a 5-D mesh of 16 GPUs."""
    from gpudl import plots
    from gpudl.estimate import NVLINK_BANDWIDTH, ring_step_time
    from gpudl.hardware import peak_flops
    from gpudl.parallel.degrees import ParallelDegrees
    from gpudl.parallel.experts import MOE_CONFIG, MoEConfig

    h100 = "H100 SXM"
    bandwidth, peak = NVLINK_BANDWIDTH[h100][0], peak_flops(h100, "bf16")
    balanced, capacity = plots.router_counts(MoEConfig(), 64)
    skewed, _ = plots.router_counts(MOE_CONFIG, 64)
    return {
        "moe-loads.png": lambda: plots.expert_loads(
            {"router at its seed": balanced, "skewed router": skewed}, capacity,
            "64 tokens, 8 experts, top-2, capacity factor 1"),
        "moe-all-to-alls.png": lambda: plots.moe_all_to_alls(
            MoEConfig(experts=4), tokens_per_rank=4, ranks=2),
        "ring-attention-steps.png": lambda: plots.ring_attention_steps(4),
        "ring-overlap.png": lambda: plots.ring_timelines(
            {f"{h100}, {chunk:,} tokens per GPU, 16 heads of 128, BF16 (cost model)":
             ring_step_time(chunk, 16, 128, bandwidth, peak) for chunk in (4096, 512)}, 4),
        "causal-balance.png": lambda: plots.causal_balance(16, 4),
        "mesh-5d.png": lambda: plots.parallel_mesh(
            ParallelDegrees(data=2, tensor=2, pipeline=2, context=2, expert=4)),
    }


def _profile_figures() -> dict:
    """Appendix E's figures, drawn from the profiles stored in results/profiles/ (recorded by
    `python -m gpudl profiles record`; the book draws them, it does not record them)."""
    from gpudl import plots, profiles

    return {
        "profile-ddp.png": lambda: plots.ddp_profile(profiles.load("ddp-gloo")),
        "profile-pipelines.png": lambda: plots.pipeline_profiles(
            [profiles.load(f"pipeline-{name}-gloo") for name in ("gpipe", "1f1b")]),
        "profile-mlp-step.png": lambda: plots.mlp_step_profile(
            profiles.load("mlp-step-simulator")),
        "profile-streams.png": lambda: plots.streams_profile(profiles.load("streams-simulator")),
    }


def figures() -> dict:
    """Every model figure of the book: its file name in book/_generated -> what draws it."""
    return {**_model_figures(), **_ch08_figures(), **_ch09_figures(), **_ch11_figures(),
            **_profile_figures()}


def draw(logger: logging.Logger | logging.LoggerAdapter,
         names: Collection[str] | None = None) -> int:
    """Draw every model figure (or those of ``names``) in English and in Chinese; warn (on
    ``logger``) for each figure with texts that have no Chinese translation. Returns the
    number of such figures."""
    import matplotlib

    matplotlib.use("Agg")
    import gpudl_figure_text as figure_text
    import matplotlib.pyplot as plt

    GENERATED.mkdir(exist_ok=True)
    translations = figure_text.load()
    untranslated = 0
    for name, draw_figure in figures().items():
        if names is not None and name not in names:
            continue
        fig = draw_figure()
        figure_text.save(fig, GENERATED / name)
        missing = figure_text.save_chinese(fig, GENERATED / name, translations)
        plt.close(fig)
        if missing:
            untranslated += 1
            logger.warning(f"figure {name}: {len(missing)} text(s) without a Chinese "
                           f"translation in {figure_text.CATALOGUE.relative_to(ROOT)} (run "
                           f"`make po`, then translate them): {missing}")
    return untranslated


if __name__ == "__main__":
    logging.basicConfig(format="%(levelname)s: %(message)s", level=logging.WARNING)
    sys.exit(1 if draw(logging.getLogger("gpudl_figures")) else 0)
