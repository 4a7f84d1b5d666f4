"""Record a program with ``torch.profiler`` on every rank and store its timeline trimmed: the
recording half of the book's profiles (:mod:`gpudl.profiles` reads them back).

Book section: *Appendix E, "Reading a profile"* ("Recording a profile").

:func:`record` runs a function under ``torch.profiler.profile``, with CPU activities (and CUDA
ones on a GPU: its kernels, copies and memsets as the GPU ran them) and with
:func:`host_ranges`, which names every Numba kernel launch, device memset and copy between the
host and the device as a range of the host's timeline: Numba's simulator has no CUDA activity
to record, so its launches show only this way, and on a GPU the range is what a launch costs
the host. :func:`profiled_worker` does it on every rank of a spawned world. The profiler
exports a Chrome trace per process; :func:`trimmed` keeps the events of one step and the
names a figure and a test need, on one time base (microseconds since the step began), ranks
as processes and each thread as a row; :func:`write` stores it with the machine, the versions,
the commit and the date (:func:`gpudl.bench.environment.machine`).
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from gpudl import backend

# isort: split
import torch
from numba import cuda
from torch.profiler import ProfilerActivity, profile, record_function

from gpudl import registry
from gpudl.bench.environment import commit, machine
from gpudl.checks import check_bool, check_callable, check_instance
from gpudl.kernels import arrays
from gpudl.profiles import FOLDER, load

__all__ = ["HOST_RANGES", "host_ranges", "profiled_worker", "record", "starts_us", "trimmed",
           "write"]

#: The categories of the host ranges :func:`host_ranges` records, by what they name.
HOST_RANGES = {"launch": "kernel launch", "copy to device": "copy", "copy to host": "copy",
               "memset": "memset"}
_PREFIX = "gpudl:"  # a host range's name while recorded: gpudl:what|name|stream|details
#: The arguments of torch's events that are kept: a bucket's size, and what links a backward
#: node to its forward operation.
_ARGS_KEPT = ("Input Dims", "Sequence number", "stream", "correlation", "device")


def _kernel_names() -> dict[tuple[str, str], str]:
    return {(k.module, k.function): name for name, k in registry.KERNELS.items()}


class _Ranged:
    """A configured launch, ``kernel[griddim, blockdim, ...]``, whose call is a host range."""

    def __init__(self, configured: Any, name: str, configuration: tuple,
                 stream_of: Callable[[object], int]) -> None:
        self.configured, self.name = configured, name
        self.stream = stream_of(configuration[2] if len(configuration) > 2 else 0)
        self.dims = f"{configuration[0]}x{configuration[1]}"

    def __call__(self, *args: Any) -> Any:
        with record_function(f"{_PREFIX}launch|{self.name}|{self.stream}|{self.dims}"):
            return self.configured(*args)

    def __getattr__(self, attribute: str) -> Any:
        return getattr(self.configured, attribute)


@contextmanager
def host_ranges() -> Iterator[None]:
    """While it is open, every kernel launch, ``device_memset``, ``to_device`` and copy of a
    device array to or from the host is a named range of the host's timeline, with its
    stream (0 for the default one, then 1, 2, ... in the order the streams are first used):
    a launch named by the kernel's registered name (:mod:`gpudl.registry`)."""
    if backend.is_simulator():
        from numba.cuda.simulator.cudadrv.devicearray import FakeCUDAArray as Array
        from numba.cuda.simulator.kernel import FakeCUDAKernel as Kernel
    else:
        from numba.cuda.cudadrv.devicearray import DeviceNDArray as Array
        from numba.cuda.dispatcher import CUDADispatcher as Kernel
    streams: dict[int, int] = {}
    names = _kernel_names()

    def stream_of(stream: object) -> int:
        if not stream:
            return 0
        return streams.setdefault(id(stream), len(streams) + 1)

    def ranged(what: str, function: Callable, nbytes: Callable[..., int]) -> Callable:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            stream = stream_of(kwargs.get("stream", 0))
            with record_function(f"{_PREFIX}{what}|{what}|{stream}|{nbytes(*args)}"):
                return function(*args, **kwargs)
        return wrapper

    configure = Kernel.__getitem__

    def getitem(kernel: Any, configuration: tuple) -> Any:
        fn = getattr(kernel, "py_func", None) or kernel
        name = names.get((fn.__module__, fn.__name__), fn.__name__)
        return _Ranged(configure(kernel, configuration), name, configuration, stream_of)

    patches = [(Kernel, "__getitem__", getitem),
               (Array, "copy_to_device", ranged("copy to device", Array.copy_to_device,
                                                lambda self, ary, *_: ary.nbytes)),
               (Array, "copy_to_host", ranged("copy to host", Array.copy_to_host,
                                              lambda self, *_: self.nbytes)),
               (arrays.driver, "device_memset", ranged("memset", arrays.driver.device_memset,
                                                       lambda dst, val, size, *_: size)),
               (cuda, "to_device", ranged("copy to device", cuda.to_device,
                                          lambda ary, *_: ary.nbytes))]
    with ExitStack() as undo:
        for owner, attribute, replacement in patches:
            undo.callback(setattr, owner, attribute, getattr(owner, attribute))
            setattr(owner, attribute, replacement)
        yield


def record(function: Callable, *args: Any, shapes: bool = False) -> tuple[Any, dict]:
    """``function(*args)`` run under ``torch.profiler`` (CPU activities, and CUDA ones on a
    GPU) and :func:`host_ranges`; its result and the Chrome trace the profiler exported.
    ``shapes`` records each operation's input shapes (a collective's size)."""
    check_callable("function", function)
    check_bool("shapes", shapes)
    activities = [ProfilerActivity.CPU]
    if not backend.is_simulator() and torch.cuda.is_available():
        activities.append(ProfilerActivity.CUDA)
    with tempfile.TemporaryDirectory(prefix="gpudl-profile-") as folder:
        with profile(activities=activities, record_shapes=shapes) as prof, host_ranges():
            result = function(*args)
        exported = Path(folder) / "trace.json"
        prof.export_chrome_trace(str(exported))
        trace = json.loads(exported.read_text())
    return result, trace


def profiled_worker(rank: int, world_size: int, worker: Callable, shapes: bool,
                    keep: Sequence[str], *args: Any) -> dict:
    """``worker(rank, world_size, *args)`` recorded by :func:`record` on this rank:
    ``{"result": what it returned, "trace": its trace}``, the trace holding only the
    metadata and the events whose name starts with one of ``keep`` (a rank's whole trace
    can be megabytes)."""
    check_callable("worker", worker)
    check_bool("shapes", shapes)
    check_instance("keep", keep, (tuple, list))
    result, trace = record(worker, rank, world_size, *args, shapes=shapes)
    trace["traceEvents"] = [e for e in trace["traceEvents"] if e.get("ph") == "M" or (
        e.get("ph") == "X" and e.get("name", "").startswith(tuple(keep)))]
    return {"result": result, "trace": trace}


def _base_us(trace: dict) -> float:
    """What to add to a trace's ``ts`` to put it on the machine's clock (torch's traces count
    from ``baseTimeNanoseconds``), so that the traces of several processes line up."""
    return trace.get("baseTimeNanoseconds", 0) / 1e3


def _rows(trace: dict) -> dict[tuple, tuple[str, str]]:
    """Each ``(pid, tid)`` of the trace's events as ``(device, row)``: the host's threads
    (``device`` empty) ``main``, ``gloo thread 1``, ..., ``thread N``, and a GPU's streams
    (``device`` ``GPU <pid>``) ``stream <id>``."""
    named: dict[tuple, str] = {}
    for event in trace["traceEvents"]:
        if event.get("ph") == "M" and event.get("name") == "thread_name":
            key = (event["pid"], event["tid"])
            if "pt_gloo" in event["args"]["name"] or key not in named:
                named[key] = event["args"]["name"]
    ids = sorted({(e["pid"], e["tid"]) for e in trace["traceEvents"] if e.get("ph") == "X"},
                 key=str)
    host = [pid for pid, tid in ids if pid == tid]  # a process's main thread has its id
    out, gloo = {}, 0
    for pid, tid in ids:
        label = named.get((pid, tid), "")
        if pid not in host:
            out[pid, tid] = (f"GPU {pid}", f"stream {tid}")
        elif pid == tid:
            out[pid, tid] = ("", "main")
        elif "gloo" in label:
            gloo += 1
            out[pid, tid] = ("", f"gloo thread {gloo}")
        else:
            out[pid, tid] = ("", f"thread {len(out)}")
    return out


def _event(event: dict, pid: int, tid: int, start_us: float) -> dict:
    """One kept event on the stored time base, its host range's name and arguments parsed."""
    name, category = event["name"], event.get("cat", "")
    args = {k: v for k, v in event.get("args", {}).items() if k in _ARGS_KEPT}
    if name.startswith(_PREFIX):
        what, name, stream, detail = name[len(_PREFIX):].split("|")
        category = HOST_RANGES[what]
        args = {"stream": int(stream)} | (
            {"grid x block": detail} if what == "launch" else {"bytes": int(detail)})
    return {"ph": "X", "cat": category, "name": name, "pid": pid, "tid": tid,
            "ts": max(0.0, round(event["ts"] - start_us, 1)), "dur": round(event["dur"], 1),
            "args": args}


def trimmed(traces: Sequence[dict], processes: Sequence[str],
            windows: Sequence[tuple[float, float]], keep: Callable[[dict], bool]
            ) -> list[dict]:
    """The events to store from the Chrome traces of ``traces`` (one per process, named by
    ``processes``): those ``keep`` accepts that start within the process's window of
    ``windows`` (microseconds on the machine's clock, as :func:`starts_us` gives them; one
    window for all, or one per process), each process a ``pid`` from 0 (a GPU's work a
    process of its own, ``"<process> GPU <n>"``), each row a ``tid`` from 0 (the main thread
    first) with a name, times in microseconds since the earliest window's start; host ranges
    renamed (:func:`host_ranges`)."""
    check_callable("keep", keep)
    windows = list(windows) * (len(traces) if len(windows) == 1 else 1)
    origin = min(start for start, _ in windows)
    out: list[dict] = []
    pids: dict[tuple, int] = {}
    for trace, process, window in zip(traces, processes, windows, strict=True):
        rows = _rows(trace)
        base = _base_us(trace)
        kept = [e for e in trace["traceEvents"] if e.get("ph") == "X"
                and window[0] <= e["ts"] + base <= window[1] and keep(e)]
        order = sorted({(e["pid"], e["tid"]) for e in kept},
                       key=lambda i: (rows[i][0], rows[i][1] != "main", rows[i][1]))
        tids: dict[tuple, int] = {}
        for key in order:
            device, row = rows[key]
            label = f"{process} {device}".strip()
            if label not in pids:
                pids[label] = len(pids)
                out += [{"ph": "M", "name": "process_name", "pid": pids[label], "tid": 0,
                         "args": {"name": label}},
                        {"ph": "M", "name": "process_sort_index", "pid": pids[label],
                         "tid": 0, "args": {"sort_index": pids[label]}}]
            tids[key] = sum(1 for other in tids if rows[other][0] == device)
            out.append({"ph": "M", "name": "thread_name", "pid": pids[label],
                        "tid": tids[key], "args": {"name": row}})
        events = [_event(e, pids[f"{process} {rows[e['pid'], e['tid']][0]}".strip()],
                         tids[e["pid"], e["tid"]], origin - base) for e in kept]
        streams: dict[int, int] = {0: 0}  # the streams of the window, numbered from 1
        for event in events:
            if "stream" in event["args"] and event["cat"] in HOST_RANGES.values():
                number = event["args"]["stream"]
                event["args"]["stream"] = streams.setdefault(number, len(streams))
        out += events
    return out


def starts_us(trace: dict, name: str) -> list[tuple[float, float]]:
    """``(start, end)`` of every event called ``name``, in microseconds on the machine's
    clock (comparable between the processes of one machine)."""
    base = _base_us(trace)
    return sorted((e["ts"] + base, e["ts"] + e["dur"] + base) for e in trace["traceEvents"]
                  if e.get("ph") == "X" and e.get("name") == name)


def write(name: str, events: list[dict], about: dict, folder: str | Path = FOLDER) -> Path:
    """Store ``events`` as ``folder/<name>.json``, a Chrome trace (one event a line) with
    ``about`` and the machine, the commit and the date under ``"gpudl"``; checked by
    :func:`gpudl.profiles.load` before it is written."""
    check_instance("about", about, dict)
    trace = {"displayTimeUnit": "ms", "gpudl": {
        "profile": name, **about, "recorded_by": f"python -m gpudl profiles record {name}",
        "machine": machine(), "commit": commit(),
        "date": datetime.now(UTC).isoformat(timespec="seconds")}, "traceEvents": events}
    load(trace)
    text = json.dumps({k: v for k, v in trace.items() if k != "traceEvents"}, indent=1)
    lines = ",\n".join(json.dumps(e, separators=(",", ":")) for e in events)
    path = Path(folder) / f"{name}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text[:-2] + f',\n "traceEvents": [\n{lines}\n]\n}}\n')
    load(path)
    return path
