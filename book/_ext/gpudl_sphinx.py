"""Local Sphinx extension for the book.

- puts the repository on sys.path, for autodoc and for the figures below;
- draws the prose's model figures (deterministic, from `gpudl.plots`) into book/_generated/
  when the build starts, so a figure in the text is always the package's current answer;
- the ``{gpudl-specs}`` directive renders `gpudl.hardware.SPECS` as a table;
- drops missing references to types documented elsewhere (NumPy, torch, numba, matplotlib)
  so that `-n` (nitpicky) warns only about the book's own broken references."""

import sys
from pathlib import Path

from docutils import nodes
from docutils.statemachine import StringList
from sphinx.util.docutils import SphinxDirective

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

EXTERNAL_TARGET_PREFIXES = (
    "numpy", "np.", "torch", "numba", "matplotlib", "pathlib", "concurrent", "collections.abc",
    "argparse"
)


GENERATED = Path(__file__).resolve().parents[1] / "_generated"


def _model_figures() -> dict:
    from gpudl import plots
    from gpudl.estimate import KERNEL_INTENSITY, model_state_memory, training_flops
    from gpudl.hardware import SPECS, peak_flops
    from gpudl.parallel import pipeline_parallel

    h100 = SPECS["H100 SXM"]
    a100 = "A100 80GB SXM"
    return {
        "roofline-h100.png": lambda: plots.roofline(
            h100.fp32_tflops * 1e12, h100.memory_bandwidth_gbs * 1e9,
            {name: (i, None) for name, i in KERNEL_INTENSITY.items()},
            "Roofline, FP32, H100 SXM (datasheet)",
        ),
        "occupancy-cc80.png": lambda: plots.occupancy_curves((8, 0)),
        "ring-model.png": lambda: plots.ring_allreduce_model(
            1e9, 400, 10e-6, [2, 4, 8, 16, 32, 64, 128, 256]
        ),
        "pipeline-schedules.png": lambda: pipeline_parallel.plot_schedules(4, 4),
        "training-time-cost.png": lambda: plots.training_time_and_cost(
            training_flops(1e9, 20.2e9), peak_flops(a100, "bf16"), a100, claimed=(4, 18)),
        "zero-memory.png": lambda: plots.memory_by_zero_stage(
            {"1B parameters, 4 GPUs": [model_state_memory(1e9, n_gpus=4, zero_stage=s) / 1e9
                                       for s in range(4)],
             "7.5B parameters, 64 GPUs": [model_state_memory(7.5e9, n_gpus=64, zero_stage=s)
                                          / 1e9 for s in range(4)]},
            {name: SPECS[name].memory_gb for name in ("V100 SXM2 32GB", "RTX A6000", a100)}),
    }


def _ch08_figures() -> dict:
    """Chapter 8's figures: the roofline with the BF16 roof, the tiles of online softmax, the
    mma fragment layout and the bytes of the attention variants (formula, proven equal to the
    traced counts by tests/test_attention.py)."""
    from gpudl import plots
    from gpudl.hardware import SPECS
    from gpudl.kernels import attention, mma
    from gpudl.kernels import matmul as mm
    from gpudl.solutions.ch03 import tile_intensity

    h100 = SPECS["H100 SXM"]
    s_long, heads, d = 4096, 16, 64

    def attention_intensity(variant: str) -> float:
        flops = 4 * heads * d * s_long**2
        return flops / sum(attention.traffic(variant, heads, s_long, d).values())

    points = {
        "v1/v2 naive matmul": (0.25, "FP32"),
        "v3 tiled": (tile_intensity(mm.TILE, mm.TILE), "FP32"),
        "v4 1-D registers": (tile_intensity(mm.V4_BM, mm.V4_BN), "FP32"),
        "v5 2-D registers": (tile_intensity(mm.V5_BM, mm.V5_BN), "FP32"),
        "attention v1, s=4096": (attention_intensity("v1_three_kernels"), "FP32"),
        "attention v2 fused, s=4096": (attention_intensity("v2_fused"), "FP32"),
        # a 64 x 64 tile of bf16 words per 16 of K: 2 * 64 * 64 * 16 flops, 2 * 128 * 16 B
        "tensor-core v2 tile (bf16)": (2 * 64 * 64 / (2 * 128), "BF16"),
    }
    s_values = [2**p for p in range(7, 15)]
    return {
        "roofline-bf16-h100.png": lambda: plots.roofline_precisions(
            {"FP32": h100.fp32_tflops * 1e12, "TF32": h100.tf32_tflops * 1e12,
             "BF16": h100.bf16_tflops * 1e12}, h100.memory_bandwidth_gbs * 1e9, points,
            "Roofline, H100 SXM (datasheet): FP32, TF32 and BF16 roofs"),
        "online-softmax-tiles.png": lambda: plots.online_softmax_tiles(
            100, attention.TILE, causal=True),
        "mma-fragments.png": lambda: plots.mma_fragments(
            {"A (16 x 16, bf16)": mma.lanes("a"), "B (16 x 8, bf16)": mma.lanes("b"),
             "C and D (16 x 8, fp32)": mma.lanes("c")}),
        "attention-bytes.png": lambda: plots.attention_bytes(
            s_values, {v: [sum(attention.traffic(v, heads, s, d).values()) for s in s_values]
                       for v in attention.VARIANTS},
            title=f"Attention, {heads} heads of d = {d}, FP32: bytes per variant"),
    }


def _draw_figures(app) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    GENERATED.mkdir(exist_ok=True)
    for name, draw in {**_model_figures(), **_ch08_figures()}.items():
        fig = draw()
        fig.savefig(GENERATED / name, dpi=110)
        plt.close(fig)


def _ignore_external(app, env, node, contnode):
    """Drop missing references to types documented elsewhere (NumPy, torch, numba)."""
    target = node.get("reftarget", "")
    type_variable = target.rsplit(".", 1)[-1] == "T"  # a TypeVar in a signature
    if target.startswith(EXTERNAL_TARGET_PREFIXES) or type_variable or target == "Path":
        return contnode
    return None


class SpecsTable(SphinxDirective):
    """``{gpudl-specs}``: the table of real GPUs, rendered from ``gpudl.hardware.SPECS`` so
    that the prose cannot drift from the package."""

    has_content = False

    def run(self):
        from gpudl.hardware import SPECS
        from gpudl.hardware import datasheet_number as _fmt

        header = (
            "| GPU | year | CC | SMs | FP32 cores/SM | CUDA cores | memory | bandwidth (GB/s) "
            "| FP32 (TFLOP/s) | FP16 tensor, dense | BF16 tensor, dense | TDP (W) | source |"
        )
        lines = [header, "|" + "---|" * 13]
        for s in SPECS.values():
            cc = f"{s.compute_capability[0]}.{s.compute_capability[1]}"
            lines.append(
                f"| {s.name} | {s.year} | {cc} | {s.sm_count} | {s.fp32_cores_per_sm} "
                f"| {s.cuda_cores:,} | {s.memory_gb:g} GB {s.memory_type} "
                f"| {_fmt(s.memory_bandwidth_gbs)} | {_fmt(s.fp32_tflops)} "
                f"| {_fmt(s.fp16_tensor_tflops)} | {_fmt(s.bf16_tflops)} | {_fmt(s.tdp_watts)} "
                f"| {{cite:p}}`{s.source}` |"
            )
        container = nodes.container()
        self.state.nested_parse(StringList(lines, source="gpudl.hardware.SPECS"), 0, container)
        return container.children


def setup(app):
    app.add_directive("gpudl-specs", SpecsTable)
    app.connect("builder-inited", _draw_figures)
    app.connect("missing-reference", _ignore_external)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
