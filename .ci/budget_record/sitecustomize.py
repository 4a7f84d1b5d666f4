"""Recorder for `.ci/gpu_budget.py measure` (never imported otherwise: only that command puts
this folder on PYTHONPATH). In every Python process of one measured item (a benchmark topic or
a notebook run on the simulator, its notebook kernel, its spawned ranks), it records:

* every kernel launched: module, name and argument types (what a GPU would compile);
* seconds spent in simulated kernels, in ``gpudl.trace.on_simulator`` (which a GPU machine
  also runs on its CPU, in a child) and in ``gpudl.parallel.spawn.spawn`` (ranks that run on
  CPUs when a machine has fewer GPUs than ranks);

and writes them to ``$GPUDL_BUDGET_DIR/<pid>.pickle`` after each launch, trace and spawn (a
notebook's kernel may end without running ``atexit``).
"""

import atexit
import os
import pickle
import sys
import time

_DIR = os.environ.get("GPUDL_BUDGET_DIR")
# (not in the driver that starts a notebook's kernel: GPUDL_BUDGET_DRIVER, which it drops
# before the kernel starts)
if (_DIR and os.environ.get("GPUDL_BACKEND") == "simulator"
        and not os.environ.get("GPUDL_BUDGET_DRIVER")):
    import gpudl  # noqa: F401  (decides the backend, installs the simulator's shims)
    from gpudl import trace
    from gpudl.parallel import spawn as launch

    _NESTED = os.environ.get("GPUDL_BUDGET_NESTED") == "1"
    _record = {"pid": os.getpid(), "nested": _NESTED, "argv": sys.argv[:3], "kernels": {},
               "types": {}, "kernel_s": 0.0, "on_simulator_s": 0.0, "spawn_s": 0.0}
    _depth = {"outer": 0}

    def _write():
        path = os.path.join(_DIR, f"{os.getpid()}.pickle")
        with open(path + ".part", "wb") as f:
            pickle.dump(_record, f)
        os.replace(path + ".part", path)

    def _types(args):
        import numba

        out = []
        for a in args:
            inner = getattr(a, "_ary", None)  # a simulated device array wraps a NumPy one
            out.append(numba.typeof(inner if inner is not None else a))
        return tuple(out)

    from numba.cuda.simulator import kernel as _sim_kernel

    _original_call = _sim_kernel.FakeCUDAKernel.__call__

    def _recording_call(self, *args):
        if self._device or _sim_kernel._get_kernel_context() is not None:
            return _original_call(self, *args)
        fn = self.fn
        try:  # keyed by the types' names (a pickle of equal types need not be equal bytes)
            types = _types(args)
            key = (fn.__module__, fn.__qualname__, str(types))
            _record["types"].setdefault(key, pickle.dumps(types))
        except Exception:  # noqa: BLE001  (an argument numba cannot type: keep the name)
            key = (fn.__module__, fn.__qualname__, "")
        _record["kernels"][key] = _record["kernels"].get(key, 0) + 1
        start = time.perf_counter()
        try:
            return _original_call(self, *args)
        finally:
            if _depth["outer"] == 0:
                _record["kernel_s"] += time.perf_counter() - start
            _write()

    _sim_kernel.FakeCUDAKernel.__call__ = _recording_call

    def _timed(original, key):
        def wrapper(*args, **kwargs):
            saved = os.environ.get("GPUDL_BUDGET_NESTED")
            os.environ["GPUDL_BUDGET_NESTED"] = "1"
            _depth["outer"] += 1
            start = time.perf_counter()
            try:
                return original(*args, **kwargs)
            finally:
                _depth["outer"] -= 1
                if _depth["outer"] == 0:
                    _record[key] += time.perf_counter() - start
                _write()
                if saved is None:
                    os.environ.pop("GPUDL_BUDGET_NESTED", None)
                else:
                    os.environ["GPUDL_BUDGET_NESTED"] = saved
        return wrapper

    trace.on_simulator = _timed(trace.on_simulator, "on_simulator_s")
    launch.spawn = _timed(launch.spawn, "spawn_s")

    atexit.register(_write)
    _write()
