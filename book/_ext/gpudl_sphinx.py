"""Local Sphinx extension for the book.

- puts the repository on sys.path, for autodoc and for the figures below;
- draws the prose's model figures (deterministic, from `gpudl.plots`) into book/_generated/
  when the build starts, so a figure in the text is always the package's current answer;
- the ``{gpudl-specs}`` directive renders `gpudl.hardware.SPECS` as a table;
- the ``{gpudl-measured}`` directive renders a "Measured on a GPU" box from the stored
  ``results/<topic>-cuda.json`` (a table or figure, the speed goals, the GPU and commit), or
  says *not yet measured* where none is stored (`gpudl_measured`);
- drops missing references to types documented elsewhere (NumPy, torch, numba, matplotlib)
  so that `-n` (nitpicky) warns only about the book's own broken references."""

import sys
from pathlib import Path

from docutils import nodes
from docutils.parsers.rst import directives
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


def _draw_figures(app) -> None:
    if not app.config.gpudl_model_figures:
        return
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    GENERATED.mkdir(exist_ok=True)
    for name, draw in _model_figures().items():
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


class MeasuredBox(SphinxDirective):
    """``{gpudl-measured} TOPIC VIEW``: a "Measured on a GPU" box. Its content says what is
    measured; below it, the ``VIEW`` of ``results/TOPIC-cuda.json`` (``gpudl_results`` in the
    Sphinx config) with the goals it is held to and its provenance, or *not yet measured*
    where no such file exists. Without arguments the box has no benchmark behind it yet."""

    optional_arguments = 2
    has_content = True
    option_spec = {"title": directives.unchanged}

    def run(self):
        from gpudl_measured import box_markdown

        from gpudl.bench.results import load_record

        topic, view = (list(self.arguments) + [None, None])[:2]
        record = None
        try:
            if topic is not None:
                path = Path(self.config.gpudl_results) / f"{topic}-cuda.json"
                if path.exists():
                    self.env.note_dependency(str(path))
                    record = load_record(path)
            # figures beside the page: its _generated/ folder (book/_generated for the book)
            page = Path(self.env.doc2path(self.env.docname)).parent
            measured = box_markdown(topic, view, record, page / "_generated")
        except (ValueError, KeyError, TypeError) as err:  # a stored file the book cannot show
            raise self.error(f"gpudl-measured {topic} {view}: {err!r}") from None
        lines = [*self.content, "", *measured]
        box = nodes.admonition(classes=["important"])
        title = self.options.get("title", "Measured on a GPU")
        box += nodes.title(title, title)
        self.state.nested_parse(StringList(lines, source=f"gpudl-measured {topic} {view}"),
                                self.content_offset, box)
        return [box]


def setup(app):
    app.add_config_value("gpudl_results", str(ROOT / "results"), "env")
    app.add_config_value("gpudl_model_figures", True, "env")
    app.add_directive("gpudl-measured", MeasuredBox)
    app.add_directive("gpudl-specs", SpecsTable)
    app.connect("builder-inited", _draw_figures)
    app.connect("missing-reference", _ignore_external)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
