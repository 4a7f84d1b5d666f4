"""Local Sphinx extension for the book.

- puts the repository on sys.path, for autodoc and for the figures below;
- draws the prose's model figures (deterministic, from `gpudl.plots`) into book/_generated/
  when the build starts, so a figure in the text is always the package's current answer;
- the ``{gpudl-specs}`` directive renders `gpudl.hardware.SPECS` as two tables (core facts;
  rates and power);
- ``{literalinclude}`` takes one more flag, ``:no-checks:``, which shows a function's teaching
  core: its input checks (``if ...: raise`` blocks and ``check_*`` calls) become one comment
  line, and stay in the source;
- serves the book's stylesheet (book/_static/gpudl.css: code boxes that hold
  ``LISTING_COLUMNS`` characters at 1280 px) and a script that shows the search page's
  snippets without TeX (book/_static/gpudl-search.js), and shows the repository and launch
  buttons only when ``repository.url`` is set in _config.yml;
- the ``{gpudl-lab-times}`` directive renders the preface's reading and lab times;
- the ``{gpudl-measured}`` directive renders a "Measured on a GPU" box from the stored
  ``results/<topic>-cuda.json`` (a table or figure, the speed goals, the GPU and commit), or
  says *not yet measured* where none is stored (`gpudl_measured`);
- resolves a reference to a name a package re-exports (``gpudl.hardware.describe``, the path
  the book teaches) to the module that defines it and where the API appendix documents it
  (``gpudl.hardware.device.describe``);
- drops missing references to types documented elsewhere (NumPy, torch, numba, matplotlib)
  so that `-n` (nitpicky) warns only about the book's own broken references."""

import ast
import sys
import textwrap
from pathlib import Path
from types import SimpleNamespace

from docutils import nodes
from docutils.parsers.rst import directives
from docutils.statemachine import StringList
from sphinx.directives.code import LiteralInclude, LiteralIncludeReader
from sphinx.util.docutils import SphinxDirective

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

EXTERNAL_TARGET_PREFIXES = (
    "numpy", "np.", "torch", "numba", "matplotlib", "pathlib", "concurrent", "collections.abc",
    "argparse"
)


GENERATED = Path(__file__).resolve().parents[1] / "_generated"

#: The widest listing line (characters) that the code box holds at a window 1280 px wide:
#: measured in headless Chromium with book/_static/gpudl.css, 100 characters of DejaVu Sans
#: Mono (the widest common monospace font) in the text, in a list and in a solution's
#: dropdown alike, less three for other fonts and scroll bars.
LISTING_COLUMNS = 97

CHECKS_OMITTED = "# (input checks omitted here; they are in the source)"


def _is_check(statement: ast.stmt) -> bool:
    """An input check: ``if ...: raise ...`` without ``else``, a bare ``check_*(...)``, or a
    loop or ``if`` whose body holds nothing but checks (left in, it would show an empty
    body)."""
    if isinstance(statement, ast.If) and not statement.orelse and all(
            isinstance(s, ast.Raise) for s in statement.body):
        return True
    if isinstance(statement, ast.For | ast.While | ast.If) and not statement.orelse:
        return all(_is_check(s) for s in statement.body)
    if isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Call):
        func = statement.value.func
        name = func.id if isinstance(func, ast.Name) else getattr(func, "attr", "")
        return name.startswith(("check_", "_check"))
    return False


def strip_checks(code: str) -> str:
    """``code`` with each run of input checks replaced by one :data:`CHECKS_OMITTED` line."""
    lines = code.splitlines()
    tree = ast.parse(textwrap.dedent(code))
    runs: list[tuple[int, int]] = []  # (first line, last line), 0-based, inclusive
    previous_block = None
    for node in ast.walk(tree):
        for field in ("body", "orelse", "finalbody"):
            block = getattr(node, field, None)
            if not isinstance(block, list):
                continue
            for statement in block:
                if not _is_check(statement):
                    continue
                first, last = statement.lineno - 1, statement.end_lineno - 1
                if runs and runs[-1][1] + 1 == first and block is previous_block:
                    runs[-1] = (runs[-1][0], last)
                else:
                    runs.append((first, last))
                previous_block = block
    # a check inside a loop or if that is itself omitted goes with it
    runs = [run for run in runs
            if not any(o != run and o[0] <= run[0] and run[1] <= o[1] for o in runs)]
    for first, last in sorted(runs, reverse=True):
        indent = lines[first][: len(lines[first]) - len(lines[first].lstrip())]
        lines[first : last + 1] = [indent + CHECKS_OMITTED]
    return "\n".join(lines) + ("\n" if code.endswith("\n") else "")


def listing_text(path: Path, options: dict) -> str:
    """The text a ``{literalinclude}`` of ``path`` with ``options`` shows (for the tests)."""
    reader = LiteralIncludeReader(str(path), options, SimpleNamespace(source_encoding="utf-8"))
    text, _ = reader.read()
    return strip_checks(text) if "no-checks" in options else text


class Listing(LiteralInclude):
    """``{literalinclude}`` with a ``:no-checks:`` flag (see :func:`strip_checks`)."""

    option_spec = {**LiteralInclude.option_spec, "no-checks": directives.flag}

    def run(self):
        result = super().run()
        if "no-checks" in self.options:
            for block in result[0].findall(nodes.literal_block):
                text = strip_checks(block.astext())
                block.rawsource = text
                block.children = [nodes.Text(text)]
        return result


def _model_figures() -> dict:
    from gpudl import plots
    from gpudl.estimate import KERNEL_INTENSITY, model_state_memory, training_flops
    from gpudl.hardware import SPECS, peak_flops
    from gpudl.optim import traffic_table
    from gpudl.plots._style import finish
    from gpudl.trace import on_simulator

    h100 = SPECS["H100 SXM"]
    a100 = "A100 80GB SXM"
    return {
        # Chapter 1
        "sm-cc90.png": lambda: plots.sm_diagram((9, 0)),
        "occupancy-cc80.png": lambda: plots.occupancy_curves((8, 0)),
        # Chapter 2 (the Hopper whitepaper's 50 MB of L2, cited in the chapter's table)
        "memory-levels-h100.png": lambda: plots.memory_levels("H100 SXM", l2_mb=50),
        "warp-sectors.png": lambda: plots.warp_sectors(on_simulator(plots.copy_requests)),
        "bank-conflicts.png": lambda: plots.bank_conflicts(
            on_simulator(plots.tile_load_requests)),
        "roofline-h100.png": lambda: plots.roofline(
            h100.fp32_tflops * 1e12, h100.memory_bandwidth_gbs * 1e9,
            {name: (i, None) for name, i in KERNEL_INTENSITY.items()},
            "Roofline, FP32, H100 SXM (datasheet)",
        ),
        # Chapter 3
        "matmul-tiling.png": plots.matmul_tiling,
        "linear-dataflow.png": lambda: plots.linear_dataflow(32, 64, 32),
        # Chapter 4: two parameter tensors are enough, the counts are per parameter
        "adam-traffic.png": lambda: plots.optimizer_traffic(
            on_simulator(traffic_table, (40, 13))),
        "master-weight.png": lambda: plots.master_weight_updates(100, -1e-3),
        # Chapter 5 (the model's and the timeline's inputs are assumptions, stated in the
        # captions)
        "ring-model.png": lambda: plots.ring_allreduce_model(
            1e9, 400, 10e-6, [2, 4, 8, 16, 32, 64, 128, 256]
        ),
        "ring-steps.png": lambda: plots.ring_steps(4),
        "ddp-overlap.png": lambda: plots.ddp_overlap(0.15, 100e6, 4, 2e9, 50e-6, (1, 4)),
        # Chapter 6
        "pipeline-schedules.png": lambda: finish(plots.pipeline_schedules(4, 4)),
        "tensor-parallel.png": lambda: plots.tensor_parallel_split(32, 64, 2),
        "zero-partition.png": lambda: plots.zero_partition(4),
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


def _ch09_figures() -> dict:
    """Chapter 9's figures, all from deterministic models: the roofline of prefill and
    decode, the KV cache against a GPU's memory, the blocks each decode variant launches,
    the paged cache's waste and batching on the seeded stream the lab replays (whose
    numbers the chapter glues from the lab)."""
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
    from gpudl.kernels import decode, paged

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
        "decode-blocks.png": lambda: plots.decode_blocks(
            lengths, blocks, h100.sm_count, "Decode attention, batch 1, 32 heads"),
        "paged-waste.png": lambda: plots.paged_waste(
            block_sizes, [w["paged_waste"] for w in waste], waste[0]["contiguous_waste"],
            "KV-cache positions reserved but empty, 200 requests"),
        "batching.png": lambda: plots.batching_timeline(
            [simulate(requests, cost, 32, p) for p in POLICIES], 32,
            "200 requests at 32 per second, batches of at most 32 (cost model)"),
    }


def _draw_figures(app) -> None:
    if not app.config.gpudl_model_figures:
        return
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    GENERATED.mkdir(exist_ok=True)
    for name, draw in {**_model_figures(), **_ch08_figures(), **_ch09_figures()}.items():
        fig = draw()
        fig.savefig(GENERATED / name, dpi=110)
        plt.close(fig)


def _defining_name(name: str) -> str | None:
    """Where the object importable as ``name`` (``gpudl.pkg.obj``, or ``gpudl.pkg.Cls.meth``)
    is defined, when that is another module (a package's re-export, or a name one module
    imports from another): the defining module's path to it; else None."""
    import importlib
    import inspect
    import pkgutil

    parts = name.split(".")
    for cut in range(len(parts) - 1, 0, -1):  # the longest prefix that is a module
        try:
            module = importlib.import_module(".".join(parts[:cut]))
            break
        except ImportError:
            continue
    else:
        return None
    package, attr, rest = ".".join(parts[:cut]), parts[cut], parts[cut + 1:]
    obj = getattr(module, attr, None)
    if obj is None:
        return None
    if inspect.isclass(obj) or inspect.isroutine(obj):
        home = obj.__module__
        return ".".join([home, obj.__qualname__, *rest]) if home != package else None
    for info in pkgutil.iter_modules(getattr(module, "__path__", [])):  # data: which module's?
        inner = importlib.import_module(f"{package}.{info.name}")
        if attr in getattr(inner, "__all__", ()) and vars(inner).get(attr) is obj:
            return ".".join([package, info.name, attr, *rest])
    return None


def _resolve_reexported(app, env, node, contnode):
    """Resolve ``gpudl.pkg.obj`` (or ``obj`` inside a module of ``gpudl.pkg``) to where ``obj``
    is defined and documented."""
    if node.get("refdomain") != "py":
        return None
    target, module = node.get("reftarget", ""), node.get("py:module") or ""
    for name in (target, f"{module}.{target}", f"{module.rpartition('.')[0]}.{target}"):
        if not name.startswith("gpudl.") or "." not in name:
            continue
        defined = _defining_name(name)
        if defined and defined != name:
            found = env.get_domain("py").resolve_xref(env, node["refdoc"], app.builder,
                                                      node["reftype"], defined, node, contnode)
            if found is not None:
                return found
    return None


def _ignore_external(app, env, node, contnode):
    """Drop missing references to types documented elsewhere (NumPy, torch, numba)."""
    target = node.get("reftarget", "")
    type_variable = target.rsplit(".", 1)[-1] == "T"  # a TypeVar in a signature
    if target.startswith(EXTERNAL_TARGET_PREFIXES) or type_variable or target == "Path":
        return contnode
    return None


#: The specs tables' headers in the Chinese edition (the glossary's terms).
SPECS_HEADERS_ZH = {
    "year": "年份", "compute capability": "计算能力", "SMs": "SM 数",
    "FP32 cores per SM": "每个 SM 的 FP32 核心数", "CUDA cores": "CUDA 核心数", "memory": "显存",
    "bandwidth (GB/s)": "带宽（GB/s）", "FP32 (TFLOP/s)": "FP32（TFLOP/s）",
    "FP16 tensor, dense": "FP16 张量核心，稠密", "BF16 tensor, dense": "BF16 张量核心，稠密",
    "TDP (W)": "热设计功耗（W）", "source": "来源",
}


class SpecsTable(SphinxDirective):
    """``{gpudl-specs} core`` or ``{gpudl-specs} rates``: the table of real GPUs, rendered from
    ``gpudl.hardware.SPECS`` so that the prose cannot drift from the package. ``core`` gives
    the chip (year, compute capability, SMs, cores, memory), ``rates`` its bandwidth, peak
    rates and power: two tables of seven columns, each readable at 1280 px."""

    has_content = False
    required_arguments = 1

    def run(self):
        from gpudl.hardware import SPECS, datasheet_number

        part = self.arguments[0]
        columns = {
            "core": ("GPU", "year", "compute capability", "SMs", "FP32 cores per SM",
                     "CUDA cores", "memory"),
            "rates": ("GPU", "bandwidth (GB/s)", "FP32 (TFLOP/s)", "FP16 tensor, dense",
                      "BF16 tensor, dense", "TDP (W)", "source"),
        }
        if part not in columns:
            raise self.error(f"gpudl-specs takes one of {list(columns)}, got {part!r}")
        header = columns[part]
        if self.config.language == "zh_CN":  # the Chinese edition's headers; the cells are data
            header = tuple(SPECS_HEADERS_ZH.get(h, h) for h in header)
        lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
        for s in SPECS.values():
            if part == "core":
                cc = f"{s.compute_capability[0]}.{s.compute_capability[1]}"
                cells = (s.name, s.year, cc, s.sm_count, s.fp32_cores_per_sm,
                         f"{s.cuda_cores:,}", f"{s.memory_gb:g} GB {s.memory_type}")
            else:
                rates = (s.memory_bandwidth_gbs, s.fp32_tflops, s.fp16_tensor_tflops,
                         s.bf16_tflops, s.tdp_watts)
                cells = (s.name, *map(datasheet_number, rates), f"{{cite:p}}`{s.source}`")
            lines.append("| " + " | ".join(str(c) for c in cells) + " |")
        container = nodes.container()
        self.state.nested_parse(StringList(lines, source="gpudl.hardware.SPECS"), 0, container)
        return container.children


def _buttons_from_repository(app, config) -> None:
    """Repository, issue and launch buttons only when ``repository.url`` is set: a book built
    from a fork that has not set it links to nothing it does not own. Only the book's theme
    (sphinx-book-theme) has these buttons; other themes are left alone."""
    if config.html_theme != "sphinx_book_theme":
        return
    options = config.html_theme_options
    has_repository = bool(options.get("repository_url"))
    options["use_repository_button"] = has_repository
    options["use_issues_button"] = has_repository
    if not has_repository:
        options.pop("launch_buttons", None)
        options.pop("repository_url", None)


class MeasuredBox(SphinxDirective):
    """``{gpudl-measured} TOPIC VIEW``: a "Measured on a GPU" box. Its content says what is
    measured; below it, the ``VIEW`` of ``results/TOPIC-cuda.json`` (``gpudl_results`` in the
    Sphinx config) with the goals it is held to and its provenance, or *not yet measured*
    where no such file exists. Without arguments the box has no benchmark behind it yet. A
    stored file that fails the schema of stored results (``gpudl.bench.results.load_record``:
    it must also hold a ``cuda`` record of its topic, with a commit) or that the view cannot
    draw is an error of the build naming the file and the field."""

    optional_arguments = 2
    has_content = True
    option_spec = {"title": directives.unchanged, "measured-by": directives.unchanged}

    def run(self):
        from gpudl_i18n import generated_nodes
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
            measured = box_markdown(topic, view, record, page / "_generated",
                                    self.options.get("measured-by"))
        except Exception as err:  # noqa: BLE001  (any stored file the book cannot show is an
            # error of the build, naming the file and the field, never a crash of Sphinx)
            raise self.error(f"gpudl-measured {topic} {view}: {err}") from None
        box = nodes.admonition(classes=["important"])
        title = self.options.get("title", "Measured on a GPU")
        box += nodes.title(title, title)
        box[0].source, box[0].line = self.get_source_info()  # a message to translate
        source = f"gpudl-measured {topic} {view}"
        self.state.nested_parse(StringList(list(self.content), source=source),
                                self.content_offset, box)
        box += generated_nodes(self.state, measured, source, self.content_offset)
        return [box]


class LabTimes(SphinxDirective):
    """``{gpudl-lab-times}``: the preface's table of reading times (derived from each chapter's
    words) and lab times (as recorded in each notebook's metadata when it was last executed)."""

    def run(self):
        from gpudl_measured import reading_and_lab_times

        for path in (ROOT / "notebooks").glob("*.ipynb"):
            self.env.note_dependency(str(path))
        language = "zh_CN" if self.config.language == "zh_CN" else "en"
        lines = reading_and_lab_times(ROOT / "book", ROOT / "notebooks", language)
        container = nodes.container()
        self.state.nested_parse(StringList(lines, source="gpudl-lab-times"), 0, container)
        return container.children


def setup(app):
    app.add_config_value("gpudl_results", str(ROOT / "results"), "env")
    app.add_config_value("gpudl_model_figures", True, "env")
    app.connect("config-inited", _buttons_from_repository)
    app.add_directive("literalinclude", Listing, override=True)
    app.config.html_static_path.append(str(Path(__file__).resolve().parents[1] / "_static"))
    app.add_css_file("gpudl.css")
    app.add_js_file("gpudl-search.js")
    app.add_directive("gpudl-measured", MeasuredBox)
    app.add_directive("gpudl-specs", SpecsTable)
    app.add_directive("gpudl-lab-times", LabTimes)
    app.connect("builder-inited", _draw_figures)
    app.connect("missing-reference", _resolve_reexported)
    app.connect("missing-reference", _ignore_external)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
