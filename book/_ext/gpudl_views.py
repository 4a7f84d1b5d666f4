"""How each view of a "Measured on a GPU" box is drawn: a table or a figure of one stored record.

:data:`DRAW` maps each topic of ``gpudl.bench`` to its views, the ones its module declares in
``VIEWS`` (``tests/test_book_measured.py`` holds the two equal), each a function
``(record, path) -> MyST lines`` that may save a figure at ``path``. Where a topic's rows come
in groups against a reference row (elementwise, memory), a view takes the group and the
reference from its bench module (``GROUPS``, checked by :func:`_group`, and ``REFERENCE``);
the other views read the fields their module's ``run`` stores (``tests/test_bench.py`` draws
each from a run). ``gpudl_measured`` puts the drawing into its box.

A view writes its words (headers, sentences, alt texts) through ``gpudl_extension_text``'s
:func:`tr`, in the edition the box is drawn for; what the stored run names (its rows, kernels,
GPU) it writes as stored. A figure's own words are the figures' catalogue's
(``gpudl_figure_text``).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # figures are files, drawn during the build

from gpudl_extension_text import current, message, tr, translated  # noqa: E402

from gpudl.bench import elementwise, memory  # noqa: E402

NOT_MEASURED = message("**Not yet measured**")


def not_measured() -> str:
    """*Not yet measured*, in the current edition."""
    return translated(NOT_MEASURED)


def _both(text: str, **fields: object) -> tuple[str, str]:
    """``text`` in English (a figure's title: its words are the figures' catalogue's) and in
    the current edition (the figure's alt text)."""
    return text.format(**fields), translated(text, **fields)


def _figure(fig: object, path: Path, alt: str) -> list[str]:
    """Save ``fig`` for the current edition (the Chinese one as ``<name>.zh_CN.png``, with the
    words that ``locales/zh_CN/figures.po`` has in Chinese, so the two editions never write
    one file) and show it with the ``alt`` text."""
    import gpudl_figure_text as figure_text
    import matplotlib.pyplot as plt

    path.parent.mkdir(parents=True, exist_ok=True)
    if current().language == figure_text.LANGUAGE:
        figure_text.save_chinese(fig, path, figure_text.load())
    else:
        figure_text.save(fig, path)
    plt.close(fig)
    return [f"```{{image}} _generated/{path.name}", f":alt: {alt}", "```"]


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


def _na() -> str:
    return tr("n/a")


def _num(value: float | None, digits: int = 0) -> str:
    return _na() if value is None else f"{value:,.{digits}f}"


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return lines + ["| " + " | ".join(cells) + " |" for cells in rows]


def _bandwidth(record: dict, names: list[str], reference: str, title: tuple[str, str],
               path: Path) -> list[str]:
    """A bar per row of ``names`` (GB/s) against the ``reference`` row's line, and a table;
    ``title``: the figure's, in English and in the current edition (:func:`_both`)."""
    from gpudl import plots

    rows = _by_name(record)
    fig = plots.rate_bars({"": {n: rows[n]["gbps"] for n in names}},
                          {"": rows[reference]["gbps"]}, "GB/s", title[0], reference)
    table = _table([tr("kernel"), tr("time (ms)"), "GB/s",
                    tr("of {reference}", reference=reference)],
                   [[n, _ms(rows[n]["median_s"]), _num(rows[n]["gbps"]),
                     f"{rows[n]['gbps'] / rows[reference]['gbps']:.0%}"]
                    for n in [*names, reference]])
    return _figure(fig, path, title[1]) + [""] + table


def _group(module: object, group: str) -> str:
    """``group`` if the bench ``module`` declares it in its ``GROUPS`` (``ValueError``
    otherwise): a view draws only groups its module stores."""
    if group not in module.GROUPS:
        raise ValueError(f"group must be one of {module.GROUPS}, got {group!r}")
    return group


def _elementwise_bandwidth(record: dict, path: Path) -> list[str]:
    reference = elementwise.REFERENCE
    names = [r["name"] for r in _rows(record, _group(elementwise, "bandwidth"))
             if r["name"] != reference]
    title = _both(message("Streaming kernels, n = {n} float32"), n=f"{record['n']:,}")
    return _bandwidth(record, names, reference, title, path)


def _elementwise_divergence(record: dict, path: Path) -> list[str]:
    rows = _rows(record, _group(elementwise, "divergence"))
    return _table([tr("mode"), tr("time (ms)"), tr("paths per warp")],
                  [[r["name"].split()[-1], _ms(r["median_s"]), str(r["max_paths_per_warp"])]
                   for r in rows])


def _elementwise_cpu_vs_gpu(record: dict, path: Path) -> list[str]:
    return _table(["SAXPY", "n", tr("time (ms)"), "GB/s"],
                  [[r["name"].removeprefix("saxpy "), f"{r['n']:,}", _ms(r["median_s"]),
                    _num(r["gbps"])] for r in _rows(record, _group(elementwise, "cpu_vs_gpu"))])


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
    return _figure(fig, path, tr("all-reduce bus bandwidth against message size"))


def _memory_group(group: str, title: str) -> Callable[[dict, Path], list[str]]:
    """The view of ``group``'s rows; ``title`` is a :func:`message`."""
    _group(memory, group)

    def view(record: dict, path: Path) -> list[str]:
        reference = memory.REFERENCE
        names = [r["name"] for r in _rows(record, group) if r["name"] != reference]
        n = f"{record['n']:,}"
        both = (f"{title}, n = {n}", tr("{title}, n = {n}", title=translated(title), n=n))
        return _bandwidth(record, names, reference, both, path)
    return view


def _memory_hierarchy(record: dict, path: Path) -> list[str]:
    if "hierarchy" not in record:
        return [tr("{not_measured}: the stored run skipped the memory hierarchy.",
                   not_measured=not_measured())]
    levels = record["hierarchy"]
    lines = _table([tr("level"), tr("latency (ns)"), tr("cycles"),
                    tr("read bandwidth (GB/s)")],
                   [[level, _num(r["ns_per_hop"], 1), _num(r["cycles_per_hop"]),
                     _num(levels["bandwidth"].get(level, {}).get("gbs"))]
                    for level, r in levels["latency"].items()])
    return lines + ["", "```text", *record["hierarchy_table"].splitlines(), "```"]


def _allreduce_p2p(record: dict, path: Path) -> list[str]:
    from gpudl import plots

    if not record.get("p2p"):
        return [tr("{not_measured} between two GPUs: the stored run skipped it ({reason}).",
                   not_measured=not_measured(), reason=record.get("p2p_skipped"))]
    rows = record["p2p"]
    fig = plots.bandwidth_vs_size(rows, "gbps", f"send/recv between 2 GPUs ({rows[0]['backend']})")
    return _figure(fig, path, tr("point-to-point bandwidth against message size"))


def _matmul_gflops(record: dict, path: Path) -> list[str]:
    from gpudl import plots

    groups, references, table = {}, {}, []
    for size in record["sizes"]:  # float32 rows: a float16 product is held to its own bar
        rows = [r for r in record["rows"] if r.get("size") == size
                and r.get("precision", "float32") == "float32"]
        groups[f"n = {size}"] = {r["variant"]: r["tflops"] * 1e3 for r in rows
                                 if r["variant"] != "torch"}
        references[f"n = {size}"] = _row(rows, "reference", variant="torch")["tflops"] * 1e3
        table += [[str(size), r["variant"], _num(r["tflops"] * 1e3),
                   _na() if r["fraction_of_torch"] is None else f"{r['fraction_of_torch']:.0%}"]
                  for r in rows]
    fig = plots.rate_bars(groups, references, "GFLOP/s", "float32 matmul (TF32 off)",
                          "cuBLAS (torch.matmul)")
    return (_figure(fig, path, tr("GFLOP/s per matmul variant against cuBLAS")) + [""]
            + _table(["n", tr("kernel"), "GFLOP/s", tr("of cuBLAS")], table))


def _matmul_mlp(record: dict, path: Path) -> list[str]:
    rows = [r for r in record["rows"] if r["name"].startswith("mlp ")]
    if not rows:
        return [tr("{not_measured}: the stored run has no MLP timing.",
                   not_measured=not_measured())]
    return _table([tr("pass"), tr("time (ms)")],
                  [[r["name"], _ms(r["median_s"])] for r in rows]) + [
        "", tr("Backward over forward: **{ratio}**.",
               ratio=f"{record['backward_over_forward']:.2f}")]


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
    note = ["", tr("Off the float64 reference by more than its bound in the stored run: "
                   "{failed}.", failed=", ".join(failed))] if failed else []
    return _figure(fig, path, tr("effective bandwidth of one Adam step per variant")) + note


def _dataparallel_steps(record: dict, path: Path) -> list[str]:
    return _table([tr("GPUs"), tr("manual (ms)"), tr("bucketed (ms)"), "DDP (ms)",
                   tr("model (ms)")],
                  [[str(r["world_size"]), *(_ms(r["step_s"][s]) for s in
                                            ("manual", "bucketed", "ddp")),
                    _na() if r["predicted_step_s"] is None else _ms(r["predicted_step_s"])]
                   for r in record["runs"]])


def _pipeline_bubble(record: dict, path: Path) -> list[str]:
    return _table([tr("schedule"), "m", tr("idle, measured"), tr("idle, formula"),
                   tr("step (ms)")],
                  [[r["schedule"], str(r["microbatches"]), f"{r['measured']:.3f}",
                    f"{r['formula']:.3f}", _ms(r["makespan_s"])] for r in record["rows"]])


def _precision_rates(record: dict, path: Path) -> list[str]:
    lines = _table(["", tr("time (ms)"), "TFLOP/s"],
                   [[r["name"], _ms(r["median_s"]), _num(r["tflops"], 1)]
                    for r in record["rows"]])
    if record.get("mfu") is not None:
        lines += ["", tr("MFU of the kernel MLP's step: **{mfu}** of {peak} TFLOP/s ({source}).",
                         mfu=f"{record['mfu']:.1%}", peak=f"{record['peak_flops'] / 1e12:.1f}",
                         source=record["peak_source"])]
    return lines


def _attention_times(record: dict, path: Path) -> list[str]:
    return _table([tr("kernel"), "s", tr("time (ms)"), "TFLOP/s"],
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
              _na() if r["fraction_of_peak"] is None else f"{r['fraction_of_peak']:.0%}"]
             for r in rows]
    return (_figure(fig, path, tr("TFLOP/s of torch.matmul per precision and size")) + [""]
            + _table([tr("precision"), "n", "TFLOP/s", tr("datasheet"), tr("of the datasheet")],
                     peaks))


def _tensorcores_kernels(record: dict, path: Path) -> list[str]:
    rows = [r for r in record["rows"] if not r["name"].startswith("torch ")]
    return _table([tr("kernel"), "n", tr("time (ms)"), "TFLOP/s"],
                  [[r["variant"], f"{r['size']:,}", _ms(r["median_s"]), _num(r["tflops"], 1)]
                   for r in rows])


def _launch_costs(record: dict, path: Path) -> list[str]:
    return _table([tr("launch"), tr("µs (fastest sample)"), tr("what was measured")],
                  [[r["name"], f"{r['min_s'] * 1e6:.1f}", r["measured"]]
                   for r in record["rows"]])


def _decode_group(group: str) -> Callable[[dict, Path], list[str]]:
    def view(record: dict, path: Path) -> list[str]:
        rows = _rows(record, group)
        return _table(["", tr("time (µs)"), "GB/s"],
                      [[r["name"], f"{r['median_s'] * 1e6:,.1f}", _num(r["gbps"], 1)]
                       for r in rows])
    return view


def _decode_graphs(record: dict, path: Path) -> list[str]:
    rows = _rows(record, "graphs") + _rows(record, "decoder")
    return _table(["", tr("kernels"), tr("time (µs)")],
                  [[r["name"], str(r["kernels"]), f"{r['median_s'] * 1e6:,.1f}"] for r in rows])


def _allreduce_all_to_all(record: dict, path: Path) -> list[str]:
    from gpudl.bench.message_sizes import human_size

    if not record.get("all_to_all"):
        return [tr("{not_measured}: the stored run has no all-to-all timing.",
                   not_measured=not_measured())]
    reduced = {(r["world_size"], r["size_bytes"]): r["busbw_gbs"] for r in record["rows"]}
    table = []
    for r in record["all_to_all"]:
        all_reduce = reduced[r["world_size"], r["size_bytes"]]
        table.append([str(r["world_size"]), human_size(r["size_bytes"]),
                      _num(r["busbw_gbs"], 1), _num(all_reduce, 1),
                      f"{r['busbw_gbs'] / all_reduce:.2f}"])
    return _table([tr("GPUs"), tr("size"), tr("all-to-all bus bandwidth (GB/s)"),
                   tr("all-reduce bus bandwidth (GB/s)"), tr("ratio")], table)


def _matmul_experts(record: dict, path: Path) -> list[str]:
    rows = _rows(record, "experts")
    if not rows:
        return [tr("{not_measured}: the stored run has no grouped experts.",
                   not_measured=not_measured())]
    return _table(["", tr("time (ms)"), "TFLOP/s", tr("rows"), tr("rows computed")],
                  [[r["name"], _ms(r["median_s"]), _num(r["tflops"], 1), f"{r['rows']:,}",
                    f"{r['rows'] if r['name'] == 'experts loop' else r['padded_rows']:,}"]
                   for r in rows])


def _context_ring(record: dict, path: Path) -> list[str]:
    rows = record["rows"]
    compute = rows[0]["median_s"]
    return _table(["", tr("ranks"), tr("time per step (ms)"), tr("of the computation alone"),
                   tr("bytes sent per step")],
                  [[r["name"], str(r["ranks"]), _ms(r["median_s"]),
                    f"{r['median_s'] / compute:.2f}",
                    _na() if r["bytes"] is None else f"{r['bytes']:,}"] for r in rows])


def _profiles_launches(record: dict, path: Path) -> list[str]:
    """The decode step's profiles, eager and replayed, drawn; each profiled step's launches
    (host launch ranges, and graph launches) and the kernels the GPU ran."""
    from gpudl import plots

    decode = {k: v for k, v in record["profiles"].items() if k.startswith("decode")}
    lines = []
    if decode:
        title, alt = _both(message("The decode step's profile, eager and replayed from its "
                                   "graph"))
        fig = plots.gpu_profiles(decode)
        fig.suptitle(title)
        lines = _figure(fig, path, alt) + [""]
    return lines + _table(
        ["", tr("launches"), tr("graph launches"), tr("GPU kernels"), tr("time (µs)")],
        [[r["name"], str(r["launches"]), str(r["graph_launches"]), str(r["kernels"]),
          f"{r['median_s'] * 1e6:,.1f}"] for r in _rows(record, "launches")])


def _profiles_kernels(record: dict, path: Path) -> list[str]:
    return _table([tr("kernel"), tr("bytes"), tr("time (µs)"), "GB/s",
                   tr("bandwidth model (µs)")],
                  [[r["name"], f"{r['bytes']:,}", f"{r['median_s'] * 1e6:,.1f}",
                    _num(r["gbps"]), _na() if r["model_s"] is None
                    else f"{r['model_s'] * 1e6:,.1f}"] for r in _rows(record, "kernels")])


#: Topic -> view -> how it is drawn; the views are those the topic's module declares in
#: ``VIEWS``, with the bars each is held to.
DRAW: dict[str, dict[str, Callable[[dict, Path], list[str]]]] = {
    "elementwise": {"bandwidth": _elementwise_bandwidth, "divergence": _elementwise_divergence,
                    "cpu_vs_gpu": _elementwise_cpu_vs_gpu},
    "memory": {"copies": _memory_group("copies", message("Copies")),
               "transposes": _memory_group("transposes", message("Transposes")),
               "reductions": _memory_group("reductions", message("Reductions (bytes read)")),
               "hierarchy": _memory_hierarchy},
    "allreduce": {"busbw": _allreduce_busbw, "p2p": _allreduce_p2p,
                  "all_to_all": _allreduce_all_to_all},
    "matmul": {"gflops": _matmul_gflops, "mlp": _matmul_mlp, "experts": _matmul_experts},
    "optim": {"bandwidth": _optim_bandwidth},
    "dataparallel": {"steps": _dataparallel_steps},
    "pipeline": {"bubble": _pipeline_bubble},
    "precision": {"rates": _precision_rates},
    "launch": {"costs": _launch_costs},
    "attention": {"times": _attention_times},
    "tensorcores": {"torch": _tensorcores_torch, "kernels": _tensorcores_kernels},
    "decode": {"attention": _decode_group("attention"), "gemv": _decode_group("gemv"),
               "graphs": _decode_graphs},
    "context": {"ring": _context_ring},
    "profiles": {"launches": _profiles_launches, "kernels": _profiles_kernels},
}
