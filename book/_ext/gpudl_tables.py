"""Tables the book renders from the package, so that the prose cannot drift from it.

- ``{gpudl-specs} core`` and ``{gpudl-specs} rates``: the real GPUs of `gpudl.hardware.SPECS`;
- ``{gpudl-kernel-registers}``: the registers and shared memory of the book's kernels, as
  ptxas reports them (`gpudl.resources`, stored in ``gpudl/kernel_resources.json``), and the
  occupancy each allows on an A100 at the block size the book launches it with
  (`gpudl.hardware.occupancy`).

The Chinese edition translates the headers; the cells are data.
"""

from docutils import nodes
from docutils.statemachine import StringList
from sphinx.util.docutils import SphinxDirective


def _table(directive: SphinxDirective, header: tuple, rows: list, source: str) -> list:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(c) for c in cells) + " |" for cells in rows]
    container = nodes.container()
    directive.state.nested_parse(StringList(lines, source=source), 0, container)
    return container.children


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
        rows = []
        for s in SPECS.values():
            if part == "core":
                cc = f"{s.compute_capability[0]}.{s.compute_capability[1]}"
                cells = (s.name, s.year, cc, s.sm_count, s.fp32_cores_per_sm,
                         f"{s.cuda_cores:,}", f"{s.memory_gb:g} GB {s.memory_type}")
            else:
                rates = (s.memory_bandwidth_gbs, s.fp32_tflops, s.fp16_tensor_tflops,
                         s.bf16_tflops, s.tdp_watts)
                cells = (s.name, *map(datasheet_number, rates), f"{{cite:p}}`{s.source}`")
            rows.append(cells)
        return _table(self, header, rows, "gpudl.hardware.SPECS")



KERNEL_HEADERS_ZH = {
    "kernel": "核函数", "threads / block": "线程数/块", "registers / thread": "寄存器/线程",
    "shared memory / block": "共享内存/块", "blocks / SM": "块数/SM", "occupancy": "占用率",
    "limited by": "限制",
}
LIMITS_ZH = {"warps": "线程束", "blocks": "线程块", "registers": "寄存器",
             "shared_memory": "共享内存"}


def occupancy_text(value: float) -> str:
    """An occupancy as its exact decimal (a multiple of 1/64: 0.4375, not 0.44), no trailing
    zeros."""
    return f"{value:.4f}".rstrip("0").rstrip(".")


class KernelRegisters(SphinxDirective):
    """``{gpudl-kernel-registers}``: one row per registered kernel that declares the block size
    the book launches it with: its registers per thread and shared memory per block on sm_80
    (its first signature), and the occupancy those allow on compute capability 8.0."""

    has_content = False

    def run(self):
        from gpudl import registry, resources
        from gpudl.hardware import occupancy

        kernels = registry.load_all()
        stored = resources.load()
        header = ("kernel", "threads / block", "registers / thread", "shared memory / block",
                  "blocks / SM", "occupancy", "limited by")
        zh = self.config.language == "zh_CN"
        if zh:
            header = tuple(KERNEL_HEADERS_ZH[h] for h in header)
        rows, seen = [], set()
        for row in stored["kernels"]:  # one row per kernel, or per build of a factory
            entry = kernels.get(row["kernel"])
            build = (row["kernel"], None if row["arguments"] is None else tuple(row["arguments"]))
            if entry is None or entry.threads_per_block is None or build in seen:
                continue
            seen.add(build)
            sm80 = row["sm_80"]
            o = occupancy(entry.threads_per_block, sm80["registers"], sm80["shared_bytes"],
                          (8, 0))
            limit = LIMITS_ZH.get(o.limit, o.limit) if zh else o.limit
            name = row["kernel"] if build[1] is None else (
                f"{row['kernel']}({', '.join(map(str, build[1]))})")
            rows.append((f"`{name}`", entry.threads_per_block, sm80["registers"],
                         f"{sm80['shared_bytes']:,} B", o.blocks_per_sm,
                         occupancy_text(o.occupancy), limit))
        if not rows:
            raise self.error("no registered kernel declares threads_per_block")
        return _table(self, header, rows, str(resources.RESOURCES))
