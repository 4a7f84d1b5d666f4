"""The contents of the book's "Measured on a GPU" boxes, drawn from stored GPU results.

:func:`box_markdown` turns one stored record (``results/<topic>-cuda.json``, checked by
``gpudl.bench.results.load_record``) into MyST markdown: a table or a figure of one view of it,
the speed goals that view is held to, and where the numbers come from (the GPU, its driver,
the CUDA, torch and numba versions, the date and the commit of the measured code). With no
record it says *not yet measured* and how to measure it. The directive ``{gpudl-measured}`` of
``gpudl_sphinx`` calls it.

:func:`reading_and_lab_times` is the preface's table of how long each chapter takes to read (its
words at an assumed pace) and how long its lab took when last executed (recorded in the
notebook's metadata by ``python -m gpudl notebooks``).
"""

from __future__ import annotations

import contextvars
import json
import re
from collections.abc import Callable
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # figures are files, drawn during the build

NOT_MEASURED = "**Not yet measured**"


class _Trail:
    """The field of a record read last (``rows[3]['gbps']``): where a malformed record that
    passed the schema failed while its view was drawn."""

    def __init__(self) -> None:
        self.field = "(the record)"


class _Fields(dict):
    """A record's object that notes each field read in a :class:`_Trail`."""

    def __init__(self, value: dict, path: str, trail: _Trail) -> None:
        super().__init__(value)
        self._path, self._trail = path, trail

    def _wrap(self, key: object, value: object) -> object:
        path = f"{self._path}[{key!r}]"
        self._trail.field = path
        return _tracked(value, path, self._trail)

    def __getitem__(self, key: object) -> object:
        self._trail.field = f"{self._path}[{key!r}]"
        return self._wrap(key, super().__getitem__(key))

    def get(self, key: object, default: object = None) -> object:
        return self._wrap(key, super().get(key, default))


class _Items(list):
    """A record's list that notes each element read in a :class:`_Trail`."""

    def __init__(self, value: list, path: str, trail: _Trail) -> None:
        super().__init__(value)
        self._path, self._trail = path, trail

    def __getitem__(self, index: object) -> object:
        self._trail.field = f"{self._path}[{index!r}]"
        item = super().__getitem__(index)
        return item if isinstance(index, slice) else _tracked(item, self._trail.field,
                                                              self._trail)

    def __iter__(self):
        for i, item in enumerate(super().__iter__()):
            self._trail.field = f"{self._path}[{i}]"
            yield _tracked(item, self._trail.field, self._trail)


def _tracked(value: object, path: str, trail: _Trail) -> object:
    if isinstance(value, dict):
        return _Fields(value, path, trail)
    if isinstance(value, list):
        return _Items(value, path, trail)
    return value


def _row(rows: list[dict], what: str, **wanted: object) -> dict:
    """The first row with the ``wanted`` fields (``KeyError`` naming ``what`` otherwise)."""
    for r in rows:
        if all(r.get(k) == v for k, v in wanted.items()):
            return r
    raise KeyError(f"rows: no {what} row with {wanted}")


def _rows(record: dict, group: str | None = None, key: str = "group") -> list[dict]:
    return [r for r in record["rows"] if group is None or r.get(key) == group]


def _by_name(record: dict) -> dict[str, dict]:
    return {r["name"]: r for r in record["rows"]}


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.3f}"


def _num(value: float | None, digits: int = 0) -> str:
    return "n/a" if value is None else f"{value:,.{digits}f}"


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return lines + ["| " + " | ".join(cells) + " |" for cells in rows]


#: The edition a box is drawn for: the Chinese build saves its figures as ``<name>.zh_CN.png``
#: with the words that ``locales/zh_CN/figures.po`` has in Chinese (the others, a kernel's name
#: or a measured number, as they are), so the two editions never write one file.
_LANGUAGE: contextvars.ContextVar[str] = contextvars.ContextVar("language", default="en")


def _figure(fig: object, path: Path, alt: str) -> list[str]:
    import gpudl_figure_text as figure_text
    import matplotlib.pyplot as plt

    path.parent.mkdir(parents=True, exist_ok=True)
    if _LANGUAGE.get() == figure_text.LANGUAGE:
        family = figure_text.cjk_family()
        if family is not None:
            figure_text.translate(fig, figure_text.load(), family)
        fig.savefig(figure_text.localized(path), dpi=110)
    else:
        fig.savefig(path, dpi=110)
    plt.close(fig)
    return [f"```{{image}} _generated/{path.name}", f":alt: {alt}", "```"]


def _bandwidth(record: dict, names: list[str], reference: str, title: str, path: Path
               ) -> list[str]:
    """A bar per row of ``names`` (GB/s) against the ``reference`` row's line, and a table."""
    from gpudl import plots

    rows = _by_name(record)
    fig = plots.rate_bars({"": {n: rows[n]["gbps"] for n in names}},
                          {"": rows[reference]["gbps"]}, "GB/s", title, reference)
    table = _table(["kernel", "time (ms)", "GB/s", f"of {reference}"],
                   [[n, _ms(rows[n]["median_s"]), _num(rows[n]["gbps"]),
                     f"{rows[n]['gbps'] / rows[reference]['gbps']:.0%}"]
                    for n in [*names, reference]])
    return _figure(fig, path, title) + [""] + table


def _elementwise_bandwidth(record: dict, path: Path) -> list[str]:
    names = [r["name"] for r in _rows(record, "bandwidth") if r["name"] != "torch copy"]
    return _bandwidth(record, names, "torch copy",
                      f"Streaming kernels, n = {record['n']:,} float32", path)


def _elementwise_divergence(record: dict, path: Path) -> list[str]:
    rows = _rows(record, "divergence")
    return _table(["mode", "time (ms)", "paths per warp"],
                  [[r["name"].split()[-1], _ms(r["median_s"]), str(r["max_paths_per_warp"])]
                   for r in rows])


def _elementwise_cpu_vs_gpu(record: dict, path: Path) -> list[str]:
    return _table(["SAXPY", "n", "time (ms)", "GB/s"],
                  [[r["name"].removeprefix("saxpy "), f"{r['n']:,}", _ms(r["median_s"]),
                    _num(r["gbps"])] for r in _rows(record, "cpu_vs_gpu")])


def _allreduce_busbw(record: dict, path: Path) -> list[str]:
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3.4))
    for ws in sorted({r["world_size"] for r in record["rows"]}):
        rows = [r for r in record["rows"] if r["world_size"] == ws]
        ax.plot([r["size_bytes"] for r in rows], [r["busbw_gbs"] for r in rows], "o-",
                label=f"{ws} GPUs ({rows[0]['backend']})")
    ax.set_xscale("log", base=2)
    ax.set(xlabel="message size (bytes)", ylabel="bus bandwidth (GB/s)", title="All-reduce")
    ax.legend()
    fig.tight_layout()
    return _figure(fig, path, "all-reduce bus bandwidth against message size")


def _memory_group(group: str, title: str) -> Callable[[dict, Path], list[str]]:
    def view(record: dict, path: Path) -> list[str]:
        names = [r["name"] for r in _rows(record, group) if r["name"] != "torch copy"]
        return _bandwidth(record, names, "torch copy", f"{title}, n = {record['n']:,}", path)
    return view


def _memory_hierarchy(record: dict, path: Path) -> list[str]:
    levels = record["hierarchy"]
    lines = _table(["level", "latency (ns)", "cycles", "read bandwidth (GB/s)"],
                   [[level, _num(r["ns_per_hop"], 1), _num(r["cycles_per_hop"]),
                     _num(levels["bandwidth"].get(level, {}).get("gbs"))]
                    for level, r in levels["latency"].items()])
    return lines + ["", "```text", *record["hierarchy_table"].splitlines(), "```"]


def _allreduce_p2p(record: dict, path: Path) -> list[str]:
    from gpudl import plots

    if not record.get("p2p"):
        return [f"{NOT_MEASURED} between two GPUs: the stored run skipped it "
                f"({record.get('p2p_skipped')})."]
    rows = record["p2p"]
    fig = plots.bandwidth_vs_size(rows, "gbps", f"send/recv between 2 GPUs ({rows[0]['backend']})")
    return _figure(fig, path, "point-to-point bandwidth against message size")


def _matmul_gflops(record: dict, path: Path) -> list[str]:
    from gpudl import plots

    groups, references, table = {}, {}, []
    for size in record["sizes"]:
        rows = [r for r in record["rows"] if r.get("size") == size]
        groups[f"n = {size}"] = {r["variant"]: r["tflops"] * 1e3 for r in rows
                                 if r["variant"] != "torch"}
        references[f"n = {size}"] = _row(rows, "reference", variant="torch")["tflops"] * 1e3
        table += [[str(size), r["variant"], _num(r["tflops"] * 1e3),
                   f"{r['fraction_of_torch']:.0%}"] for r in rows]
    fig = plots.rate_bars(groups, references, "GFLOP/s", "float32 matmul (TF32 off)",
                          "cuBLAS (torch.matmul)")
    return (_figure(fig, path, "GFLOP/s per matmul variant against cuBLAS") + [""]
            + _table(["n", "kernel", "GFLOP/s", "of cuBLAS"], table))


def _matmul_mlp(record: dict, path: Path) -> list[str]:
    rows = [r for r in record["rows"] if r["name"].startswith("mlp ")]
    if not rows:
        return [f"{NOT_MEASURED}: the stored run has no MLP timing."]
    return _table(["pass", "time (ms)"], [[r["name"], _ms(r["median_s"])] for r in rows]) + [
        "", f"Backward over forward: **{record['backward_over_forward']:.2f}**."]


def _optim_bandwidth(record: dict, path: Path) -> list[str]:
    from gpudl import plots

    layouts = list(dict.fromkeys(r["layout"] for r in record["rows"]))
    groups = {lay: {r["optimizer"]: r["gbps"] for r in record["rows"]
                    if r["layout"] == lay and r["optimizer"] != "copy"} for lay in layouts}
    copies = {r["layout"]: r["gbps"] for r in record["rows"] if r["optimizer"] == "copy"}
    fig = plots.rate_bars(groups, copies, "GB/s (28 B/param; copy: 8 B)",
                          "One Adam step: effective bandwidth", "device copy")
    failed = [f"`{r['name']}` ({', '.join(r['check']['failed'])})" for r in record["rows"]
              if r["check"] and not r["check"]["ok"]]
    note = ["", "Off the float64 reference by more than its bound in the stored run: "
            + ", ".join(failed) + "."] if failed else []
    return _figure(fig, path, "effective bandwidth of one Adam step per variant") + note


def _dataparallel_steps(record: dict, path: Path) -> list[str]:
    return _table(["GPUs", "manual (ms)", "bucketed (ms)", "DDP (ms)", "model (ms)"],
                  [[str(r["world_size"]), *(_ms(r["step_s"][s]) for s in
                                            ("manual", "bucketed", "ddp")),
                    "n/a" if r["predicted_step_s"] is None else _ms(r["predicted_step_s"])]
                   for r in record["runs"]])


def _pipeline_bubble(record: dict, path: Path) -> list[str]:
    return _table(["schedule", "m", "idle, measured", "idle, formula", "step (ms)"],
                  [[r["schedule"], str(r["microbatches"]), f"{r['measured']:.3f}",
                    f"{r['formula']:.3f}", _ms(r["makespan_s"])] for r in record["rows"]])


def _precision_rates(record: dict, path: Path) -> list[str]:
    lines = _table(["", "time (ms)", "TFLOP/s"],
                   [[r["name"], _ms(r["median_s"]), _num(r["tflops"], 1)]
                    for r in record["rows"]])
    if record.get("mfu") is not None:
        lines += ["", f"MFU of the kernel MLP's step: **{record['mfu']:.1%}** of "
                  f"{record['peak_flops'] / 1e12:.1f} TFLOP/s ({record['peak_source']})."]
    return lines


def _attention_times(record: dict, path: Path) -> list[str]:
    return _table(["kernel", "s", "time (ms)", "TFLOP/s"],
                  [[r["name"].rsplit(" s=", 1)[0], f"{r['s']:,}", _ms(r["median_s"]),
                    _num(r["tflops"], 1)] for r in record["rows"]])


def _tensorcores_torch(record: dict, path: Path) -> list[str]:
    from gpudl import plots

    rows = [r for r in record["rows"] if r["name"].startswith("torch ")]
    sizes = sorted({r["size"] for r in rows})
    groups = {f"n = {n:,}": {r["dtype"]: r["tflops"] for r in rows if r["size"] == n}
              for n in sizes}
    fig = plots.rate_bars(groups, {}, "TFLOP/s", "torch.matmul per precision", "")
    peaks = [[r["dtype"], f"{r['size']:,}", _num(r["tflops"], 1), _num(r["peak_tflops"], 1),
              "n/a" if r["fraction_of_peak"] is None else f"{r['fraction_of_peak']:.0%}"]
             for r in rows]
    return (_figure(fig, path, "TFLOP/s of torch.matmul per precision and size") + [""]
            + _table(["precision", "n", "TFLOP/s", "datasheet", "of the datasheet"], peaks))


def _tensorcores_kernels(record: dict, path: Path) -> list[str]:
    rows = [r for r in record["rows"] if not r["name"].startswith("torch ")]
    return _table(["kernel", "n", "time (ms)", "TFLOP/s"],
                  [[r["variant"], f"{r['size']:,}", _ms(r["median_s"]), _num(r["tflops"], 1)]
                   for r in rows])


def _launch_costs(record: dict, path: Path) -> list[str]:
    return _table(["launch", "µs (fastest sample)", "what was measured"],
                  [[r["name"], f"{r['min_s'] * 1e6:.1f}", r["measured"]]
                   for r in record["rows"]])


def _decode_group(group: str) -> Callable[[dict, Path], list[str]]:
    def view(record: dict, path: Path) -> list[str]:
        rows = _rows(record, group)
        return _table(["", "time (µs)", "GB/s"],
                      [[r["name"], f"{r['median_s'] * 1e6:,.1f}", _num(r["gbps"], 1)]
                       for r in rows])
    return view


def _decode_graphs(record: dict, path: Path) -> list[str]:
    rows = _rows(record, "graphs") + _rows(record, "decoder")
    return _table(["", "kernels", "time (µs)"],
                  [[r["name"], str(r["kernels"]), f"{r['median_s'] * 1e6:,.1f}"] for r in rows])


#: topic -> view -> (how to draw it, the bars it is held to).
VIEWS: dict[str, dict[str, tuple[Callable[[dict, Path], list[str]], tuple[str, ...]]]] = {
    "elementwise": {
        "bandwidth": (_elementwise_bandwidth, ("vector_add_v2_vs_torch_copy",
                                               "vector_add_in_flight_vs_torch_copy")),
        "divergence": (_elementwise_divergence, ("parity_divergence_over_warp",)),
        "cpu_vs_gpu": (_elementwise_cpu_vs_gpu, ()),
    },
    "memory": {
        "copies": (_memory_group("copies", "Copies"), ("copy_vs_torch_copy",)),
        "transposes": (_memory_group("transposes", "Transposes"),
                       ("padded_transpose_vs_torch_copy", "padded_transpose_vs_naive")),
        "reductions": (_memory_group("reductions", "Reductions (bytes read)"),
                       ("best_reduction_vs_torch_copy", "best_reduction_vs_torch_sum")),
        "hierarchy": (_memory_hierarchy, ()),
    },
    "allreduce": {"busbw": (_allreduce_busbw, ()), "p2p": (_allreduce_p2p, ())},
    "matmul": {"gflops": (_matmul_gflops, ("best_matmul_vs_torch",)),
               "mlp": (_matmul_mlp, ())},
    "optim": {"bandwidth": (_optim_bandwidth, ("fused_adam_vs_copy",
                                               "multi_tensor_vs_torch_foreach",
                                               "multi_tensor_vs_torch_fused"))},
    "dataparallel": {"steps": (_dataparallel_steps, ("bucketed_vs_ddp_x",))},
    "pipeline": {"bubble": (_pipeline_bubble, ())},
    "precision": {"rates": (_precision_rates, ())},
    "launch": {"costs": (_launch_costs, ())},
    "attention": {"times": (_attention_times, ("fused_",))},
    "tensorcores": {"torch": (_tensorcores_torch, ()),
                    "kernels": (_tensorcores_kernels, ("tensor_core_",))},
    "decode": {"attention": (_decode_group("attention"), ("split_kv_",)),
               "gemv": (_decode_group("gemv"), ("gemv_int8_",)),
               "graphs": (_decode_graphs, ("graph_",))},
}


def _goals(record: dict, prefixes: tuple[str, ...]) -> list[str]:
    lines = []
    for b in record["bars"]:
        if not prefixes or not b["name"].startswith(prefixes):
            continue
        verdict = {True: "met", False: "**missed**", None: "not measured"}[b["verdict"]]
        ratio = "n/a" if b["ratio"] is None else f"{b['ratio']:.2f}"
        lines.append(f"- {b['what']}: **{ratio}** (goal {b['compare']} {b['threshold']:g}), "
                     f"{verdict}.")
    return lines


def provenance(record: dict, source: str) -> str:
    """Where the numbers come from: the GPU and its software, the date, the commit."""
    m = record["machine"]
    v = m["versions"]
    return (f"Measured on **{m['gpu']}** (driver {m['driver']}, CUDA {m['cuda_driver']}, "
            f"torch {v.get('torch')}, numba {v.get('numba')}, numba-cuda "
            f"{v.get('numba-cuda')}) on {record['date'][:10]}, code at commit "
            f"`{record['commit'][:12]}` (`{source}`).")


def box_markdown(topic: str | None, view: str | None, record: dict | None,
                 generated: Path, measured_by: str | None = None,
                 language: str = "en") -> list[str]:
    """The measured part of a box: ``view`` of ``topic``'s stored ``record`` (figures into
    ``generated``, as ``<name>.zh_CN.png`` in Chinese where ``language`` is ``"zh_CN"``), or
    *not yet measured* when there is no record. A box with no topic says what would measure
    it (``measured_by``), or that nothing in the book does yet."""
    source = f"results/{topic}-cuda.json"
    if topic is None:
        return [f"{NOT_MEASURED}: {measured_by or 'no benchmark of the book measures it yet'}; "
                "no GPU run of it is stored in `results/`."]
    if topic not in VIEWS or view not in VIEWS[topic]:
        raise ValueError(f"no view {view!r} of topic {topic!r}; views: "
                         f"{ {t: list(v) for t, v in VIEWS.items()} }")
    if record is None:
        return [f"{NOT_MEASURED}: no GPU run of this benchmark is stored in `results/` "
                f"(`python -m gpudl bench {topic}` writes `{source}`)."]
    draw, bars = VIEWS[topic][view]
    trail = _Trail()
    tracked = _tracked(record, "", trail)
    try:
        edition = _LANGUAGE.set(language)
        try:
            lines = draw(tracked, generated / f"measured-{topic}-{view}.png")
        finally:
            _LANGUAGE.reset(edition)
        goals = _goals(tracked, bars)
        note = provenance(tracked, source)
    except Exception as err:  # any record the view cannot draw: name the file and the field
        raise MalformedRecord(f"{source}: field {trail.field or '(the record)'}: "
                              f"{type(err).__name__}: {err}") from None
    return [*lines, "", *goals, "" if goals else "", note]


class MalformedRecord(ValueError):
    """A stored record that passed the schema but that a view cannot draw."""


#: The reading pace the preface's estimates assume, in words of prose per minute (an assumed
#: pace for technical text with formulas and code, not a measurement).
WORDS_PER_MINUTE = 150


def prose_words(text: str) -> int:
    """The words of a chapter's MyST source outside its code and directive fences (the prose a
    reader reads; listings and figures are not counted)."""
    words, fence = 0, None
    for line in text.splitlines():
        marker = re.match(r"^\s*(`{3,}|:{3,})", line)
        if marker and fence is None:
            admonition = re.match(r"^\s*(`{3,}|:{3,})\{(admonition|note|figure)\}", line)
            fence = None if admonition else marker.group(1)
            continue
        if fence is not None:
            fence = None if line.strip() == fence else fence
            continue
        words += len(line.split())
    return words


#: The preface's table in the Chinese edition: its headers, and how a lab's run reads.
LAB_TIMES_ZH = {"header": ["章", "正文词数（英文原文）", "阅读时间", "其实验上次执行的耗时"],
                "none": "未记录", "minutes": "{minutes} 分钟",
                "took": "{minutes} 分钟，{backend}，{threads} 个 CPU 线程，{date}",
                "backend": {"simulator": "模拟器（simulator）", "cuda": "GPU（CUDA）"}}


def reading_and_lab_times(book: Path, notebooks: Path, language: str = "en") -> list[str]:
    """A table, one row per chapter: its words and the minutes they take at
    :data:`WORDS_PER_MINUTE`, and the minutes its lab took when last executed, with the
    backend and the CPU threads of that run (or that no run recorded its time). With
    ``language`` ``"zh_CN"`` its words are Chinese (:data:`LAB_TIMES_ZH`), its numbers the same."""
    if language not in ("en", "zh_CN"):
        raise ValueError(f"language must be 'en' or 'zh_CN', got {language!r}")
    zh = LAB_TIMES_ZH if language == "zh_CN" else None
    rows = []
    for md in sorted(book.glob("ch[0-9][0-9]-*.md")):
        number = int(md.name[2:4])
        words = prose_words(md.read_text())
        lab = next(iter(sorted(notebooks.glob(f"{number:02d}-*.ipynb"))), None)
        run = json.loads(lab.read_text())["metadata"].get("gpudl") if lab else None
        minutes = f"{words / WORDS_PER_MINUTE:.0f}"
        if run is None:
            took = zh["none"] if zh else "not recorded"
        elif zh:
            took = zh["took"].format(minutes=f"{run['seconds'] / 60:.0f}",
                                     backend=zh["backend"].get(run["backend"], run["backend"]),
                                     threads=run["cpu_threads"], date=run["date"])
        else:
            took = (f"{run['seconds'] / 60:.0f} min on the {run['backend']}, "
                    f"{run['cpu_threads']} CPU threads, {run['date']}")
        reading = zh["minutes"].format(minutes=minutes) if zh else f"{minutes} min"
        rows.append([f"{number}", f"{words:,}", reading, took])
    header = zh["header"] if zh else ["chapter", "words of prose", "reading",
                                      "its lab, last executed"]
    return _table(header, rows)
