"""Tables the book renders from the package, so that the prose cannot drift from it.

- ``{gpudl-specs} core`` and ``{gpudl-specs} rates``: the real GPUs of `gpudl.hardware.SPECS`;
- ``{gpudl-kernel-registers}``: the registers and shared memory of the book's kernels, as
  ptxas reports them (`gpudl.resources`, stored in ``gpudl/kernel_resources.json``), and the
  occupancy each allows on an A100 at the block size the book launches it with
  (`gpudl.hardware.occupancy`).

The Chinese edition translates the headers and the words among the cells (a rate a GPU does
not have, the limit that binds) from ``locales/zh_CN/extensions.po`` (``gpudl_extension_text``);
the other cells are data.
"""

from docutils import nodes
from docutils.statemachine import StringList
from gpudl_editions import edition_words
from gpudl_extension_text import message
from sphinx.util.docutils import SphinxDirective


def _table(directive: SphinxDirective, header: tuple, rows: list, source: str) -> list:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(c) for c in cells) + " |" for cells in rows]
    container = nodes.container()
    directive.state.nested_parse(StringList(lines, source=source), 0, container)
    return container.children


#: The columns of ``{gpudl-specs} core`` and ``rates``.
SPECS_COLUMNS = {
    "core": ("GPU", message("year"), message("compute capability"), message("SMs"),
             message("FP32 cores per SM"), message("CUDA cores"), message("memory")),
    "rates": ("GPU", message("bandwidth (GB/s)"), message("FP32 (TFLOP/s)"),
              message("FP16 tensor, dense"), message("BF16 tensor, dense"), message("TDP (W)"),
              message("source")),
}
#: What ``gpudl.hardware.datasheet_number`` writes for a rate a GPU does not have.
NO_VALUE = message("none")


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
        if part not in SPECS_COLUMNS:
            raise self.error(f"gpudl-specs takes one of {list(SPECS_COLUMNS)}, got {part!r}")
        words = edition_words(self)
        header = tuple(h if h == "GPU" else words(h) for h in SPECS_COLUMNS[part])

        def number(value: float | None) -> str:
            text = datasheet_number(value)
            return words(NO_VALUE) if text == NO_VALUE else text

        rows = []
        for s in SPECS.values():
            if part == "core":
                cc = f"{s.compute_capability[0]}.{s.compute_capability[1]}"
                cells = (s.name, s.year, cc, s.sm_count, s.fp32_cores_per_sm,
                         f"{s.cuda_cores:,}", f"{s.memory_gb:g} GB {s.memory_type}")
            else:
                rates = (s.memory_bandwidth_gbs, s.fp32_tflops, s.fp16_tensor_tflops,
                         s.bf16_tflops, s.tdp_watts)
                cells = (s.name, *map(number, rates), f"{{cite:p}}`{s.source}`")
            rows.append(cells)
        return _table(self, header, rows, "gpudl.hardware.SPECS")


#: The columns of ``{gpudl-kernel-registers}``.
KERNEL_COLUMNS = (message("kernel"), message("threads / block"), message("registers / thread"),
                  message("shared memory / block"), message("blocks / SM"),
                  message("occupancy"), message("limited by"))
#: What can limit the occupancy (``gpudl.hardware.Occupancy.limit``).
LIMITS = (message("warps"), message("blocks"), message("registers"), message("shared_memory"))


def occupancy_text(value: float) -> str:
    """An occupancy as its exact decimal (a multiple of 1/64: 0.4375, not 0.44), no trailing
    zeros."""
    return f"{value:.4f}".rstrip("0").rstrip(".")


class KernelRegisters(SphinxDirective):
    """``{gpudl-kernel-registers}``: one row per registered kernel that declares the block size
    the book launches it with (a Triton kernel: per configuration, ``num_warps`` warps): its
    registers per thread and shared memory per block on sm_80 (its first signature), and the
    occupancy those allow on compute capability 8.0."""

    has_content = False

    def run(self):
        from gpudl import registry, resources
        from gpudl.hardware import occupancy

        kernels = registry.load_all()
        stored = resources.load()
        words = edition_words(self)
        header = tuple(map(words, KERNEL_COLUMNS))
        rows, seen = [], set()
        for row in stored["kernels"]:  # one row per kernel, or per build of a factory
            entry = kernels.get(row["kernel"])
            build = (row["kernel"], None if row["arguments"] is None else tuple(row["arguments"]))
            if entry is None or entry.threads_per_block is None or build in seen:
                continue
            seen.add(build)
            sm80 = row["sm_80"]
            threads = resources.threads_per_block(row, entry)
            o = occupancy(threads, sm80["registers"], sm80["shared_bytes"], (8, 0))
            limit = words(o.limit) if o.limit in LIMITS else o.limit
            name = row["kernel"] if build[1] is None else (
                f"{row['kernel']}({', '.join(map(str, build[1]))})")
            rows.append((f"`{name}`", threads, sm80["registers"],
                         f"{sm80['shared_bytes']:,} B", o.blocks_per_sm,
                         occupancy_text(o.occupancy), limit))
        if not rows:
            raise self.error("no registered kernel declares threads_per_block")
        return _table(self, header, rows, str(resources.RESOURCES))
