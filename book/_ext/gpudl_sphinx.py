"""Local Sphinx extension: puts the repository on sys.path for autodoc, and lists the
cross-references that point outside this book (NumPy, torch, numba types in signatures) so that
`-n` (nitpicky) warns only about the book's own broken references."""

import sys
from pathlib import Path

from docutils import nodes
from docutils.statemachine import StringList
from sphinx.util.docutils import SphinxDirective

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

EXTERNAL_TARGET_PREFIXES = ("numpy", "np.", "torch", "numba", "concurrent", "collections.abc")


def _ignore_external(app, env, node, contnode):
    """Drop missing references to types documented elsewhere (NumPy, torch, numba)."""
    target = node.get("reftarget", "")
    if target.startswith(EXTERNAL_TARGET_PREFIXES) or target in {"T", "Path", "pathlib.Path"}:
        return contnode
    return None


def _fmt(value: float | int | None) -> str:
    """Datasheet style: 0.236, 19.5, 1,555, and "none" for a missing rate."""
    if value is None:
        return "none"
    if value < 10:
        return f"{value:.3g}"
    return f"{value:,.1f}".removesuffix(".0")


class SpecsTable(SphinxDirective):
    """``{gpudl-specs}``: the table of real GPUs, rendered from ``gpudl.hardware.SPECS`` so
    that the prose cannot drift from the package."""

    has_content = False

    def run(self):
        from gpudl.hardware import SPECS

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
    app.connect("missing-reference", _ignore_external)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
