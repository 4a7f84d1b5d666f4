"""The book's stored profiles (results/profiles/) read back and held to the claims Appendix E
makes of them: a DDP all-reduce overlaps the backward of a later bucket, a pipeline's idle
fraction is the bubble formula's, the kernel MLP's step launches the kernels the model counts,
the simulator runs streams one operation at a time; recording end to end at a tiny size; the
GPU profiles (marked gpu) of the bench topic ``profiles``."""

import re
from pathlib import Path

import pytest

import gpudl  # noqa: F401  (decides the backend first)
from gpudl import profiles
from gpudl.bench.profiler import write
from gpudl.bench.profiles import record_ddp, record_mlp_step
from gpudl.estimate import bubble_fraction
from gpudl.models import KernelMLP
from gpudl.parallel.pipeline import idle_fraction, schedule

ROOT = Path(__file__).resolve().parent.parent
#: A stored profile stays small enough to commit and to download from the book.
MAX_BYTES = 50_000
#: The profile's clock and the hooks' (time.perf_counter) are lined up at the start of the
#: backward pass, where the worker reads its clock a few microseconds before it opens the
#: profiler's range: a hook's time may lead the profile's by that much.
CLOCK_SLACK_S = 1e-4
# The paced pipeline: each pass is stretched to a fixed length (30 ms per sample of its
# micro-batch forward, twice that backward), so the formula's assumption of equal passes
# holds; a stall of the busy machine only lengthens a step, raising its idle fraction, and the
# recorder keeps the median of three steps. tests/test_pipeline_parallel.py derived 0.05 from
# repeated runs under load (at most 0.047 above the formula); the recordings of this profile
# (CONTRIBUTING, "Profiles") stayed within it.
BUBBLE_TOLERANCE = 0.05


@pytest.fixture(scope="module")
def ddp():
    return profiles.load("ddp-gloo")


def _bucket_of_layer(trace: dict) -> dict[int, int]:
    return {layer: b["bucket"] for b in trace["gpudl"]["buckets"] for layer in b["layers"]}


def _matmuls(trace: dict, process: str) -> list[profiles.Span]:
    """Each layer's AddmmBackward0 on ``process``'s main thread."""
    return [s for s in profiles.spans(trace, process=process)
            if s.name.endswith("AddmmBackward0")]


@pytest.mark.parametrize("name", list(profiles.STORED))
def test_every_stored_profile_is_small_and_says_what_ran_where(name):
    path = profiles.path(name)
    assert path.stat().st_size <= MAX_BYTES
    trace = profiles.load(path)
    about = trace["gpudl"]
    assert about["profile"] == name and about["what"] == profiles.STORED[name]
    assert about["machine"]["versions"]["torch"] and about["program"]
    assert about["recorded_by"] == f"python -m gpudl profiles record {name}"
    assert profiles.spans(trace) and all(s.duration_s >= 0 for s in profiles.spans(trace))


def test_a_ddp_all_reduce_overlaps_the_backward_of_a_later_bucket(ddp):
    """On some rank, a bucket's all-reduce (gloo's thread) runs while the main thread computes
    the backward of a layer of a later bucket. Not necessarily on every rank: on two shared
    cores the gloo threads wait for a core while both ranks' main threads compute (in 12
    recordings, 23 of 24 ranks showed it; CONTRIBUTING, "Profiles")."""
    bucket_of = _bucket_of_layer(ddp)
    largest = {}
    for process in ("rank 0", "rank 1"):
        largest[process] = max(a.overlap_s(m) for a in profiles.spans(
            ddp, ["gloo:all_reduce"], process=process) for m in _matmuls(ddp, process)
            if bucket_of[m.args["layer"]] > a.args["bucket"])
        print(f"{process}: an all-reduce overlaps a later bucket's backward by up to "
              f"{largest[process] * 1e3:.2f} ms")
    assert max(largest.values()) > 0


def test_ddp_asks_for_each_bucket_once_its_layers_are_done_and_gloo_runs_it_after(ddp):
    buckets = ddp["gpudl"]["buckets"]
    layers = len(ddp["gpudl"]["program"]["dims"]) - 1
    for process in ("rank 0", "rank 1"):
        matmuls = _matmuls(ddp, process)
        # the backward pass visits the layers last first
        assert [m.args["layer"] for m in matmuls] == list(range(layers))[::-1]
        asked = profiles.spans(ddp, ["c10d::allreduce_"], process=process)
        run = profiles.spans(ddp, ["gloo:all_reduce"], process=process)
        assert [a.args["bucket"] for a in asked] == [b["bucket"] for b in buckets]
        assert sorted(r.args["bucket"] for r in run) == [b["bucket"] for b in buckets]
        assert {r.thread for r in run} <= {"gloo thread 1", "gloo thread 2"}
        for bucket in buckets:
            call = next(a for a in asked if a.args["bucket"] == bucket["bucket"])
            done = max(m.end_s for m in matmuls if m.args["layer"] in bucket["layers"])
            assert call.start_s >= done
            assert next(r for r in run if r.args["bucket"] == bucket["bucket"]).start_s >= (
                call.start_s)
    # a call that only queues the work, in which the main thread waited for milliseconds
    longest = max(a.duration_s for a in profiles.spans(ddp, ["c10d::allreduce_"]))
    assert longest >= 1e-3
    print(f"the longest call into c10d::allreduce_ took {longest * 1e3:.2f} ms")


def test_the_hooks_timeline_and_the_profile_agree_on_when_each_all_reduce_was_asked(ddp):
    """The book's timeline (gpudl.parallel.data.timeline) notes a bucket's all-reduce when
    its hook is called and when its completion callback runs; the profile shows the call
    into c10d after it and gloo's thread running the all-reduce, later still."""
    for hooks in ddp["gpudl"]["hooks"]:
        process = f"rank {hooks['rank']}"
        began = profiles.spans(ddp, ["DDP backward pass"], process=process)[0].start_s
        asked = {a.args["bucket"]: a for a in profiles.spans(ddp, ["c10d::allreduce_"],
                                                               process=process)}
        run = {r.args["bucket"]: r for r in profiles.spans(ddp, ["gloo:all_reduce"],
                                                             process=process)}
        for hook in hooks["allreduce"]:
            start = began + hook["start_s"]
            assert start <= asked[hook["bucket"]].start_s + CLOCK_SLACK_S
            assert start <= run[hook["bucket"]].start_s + CLOCK_SLACK_S
            print(f"{process}, bucket {hook['bucket']}: gloo started "
                  f"{(run[hook['bucket']].start_s - start) * 1e3:.2f} ms after the hook")


@pytest.mark.parametrize("name", ["pipeline-gpipe-gloo", "pipeline-1f1b-gloo"])
def test_the_pipeline_profile_runs_the_schedule_with_the_bubble_of_the_formula(name):
    trace = profiles.load(name)
    program = trace["gpudl"]["program"]
    p, m = program["stages"], program["microbatches"]
    timelines = profiles.action_timelines(trace)
    assert [[(a["kind"], a["microbatch"]) for a in t] for t in timelines] == [
        schedule(program["schedule"], s, p, m) for s in range(p)]
    ends = {(a["kind"], s, a["microbatch"]): a["end_s"] for s, t in enumerate(timelines)
            for a in t}
    for s, timeline in enumerate(timelines):  # one pass at a time, each after its input
        assert all(a["end_s"] <= b["start_s"] for a, b in zip(timeline, timeline[1:], strict=False))
        for a in timeline:
            needs = ("F", s - 1) if a["kind"] == "F" else ("B", s + 1)
            if 0 <= needs[1] < p:
                assert a["start_s"] >= ends[needs[0], needs[1], a["microbatch"]]
    idle, formula = idle_fraction(timelines), bubble_fraction(p, m)
    assert abs(idle - formula) <= BUBBLE_TOLERANCE, (idle, formula)
    assert trace["gpudl"]["bubble_fraction"] == formula == pytest.approx(
        trace["gpudl"]["simulated_idle"])
    print(f"{name}: idle {idle:.4f} in the profile, {formula:.4f} by the formula")


def test_the_mlp_step_launches_the_kernels_the_model_counts_part_by_part():
    trace = profiles.load("mlp-step-simulator")
    program = trace["gpudl"]["program"]
    counted = KernelMLP(tuple(program["sizes"])).launches_per_step()
    launches = profiles.spans(trace, category="kernel launch")
    for part in profiles.spans(trace, list(counted)):
        inside = [s for s in launches if part.start_s <= s.start_s <= part.end_s]
        assert len(inside) == counted[part.name], part.name
    assert len(launches) == sum(counted.values())
    assert all(s.duration_s > 0 for s in launches)  # each launch's host time is there
    # inside the loss: the labels back to the host (checked to be classes), the loss sum's
    # zero to the device, the loss back: on a GPU, two waits for the queued work every step
    loss = profiles.spans(trace, ["loss"])[0]
    copies = [(s.name, s.args["bytes"]) for s in profiles.spans(trace, category="copy")
              if loss.start_s <= s.start_s <= loss.end_s]
    assert copies == [("copy to host", 8 * program["batch"]), ("copy to device", 4),
                      ("copy to host", 4)]


def test_chapter_3_states_the_launches_the_model_counts():
    text = " ".join((ROOT / "book" / "ch03-matmul-backprop.md").read_text().split())
    stated = re.search(r"launches (\d+) kernels \((\d+) forward, (\d+) for the loss, (\d+) "
                       r"backward, (\d+) for the update\)", text)
    assert stated, "Chapter 3 no longer states a step's launches in the form this test reads"
    counted = KernelMLP((64, 32, 10)).launches_per_step()
    assert [int(n) for n in stated.groups()] == [sum(counted.values()), *counted.values()]


def test_the_simulator_runs_each_chunk_on_its_stream_one_operation_at_a_time():
    trace = profiles.load("streams-simulator")
    program = trace["gpudl"]["program"]
    assert trace["gpudl"]["synchronous"] is True
    ops = [s for s in profiles.spans(trace) if s.category in ("copy", "memset", "kernel launch")]
    per_chunk = ["copy to device", "copy to device", "memset", "saxpy_v1_naive", "copy to host"]
    assert [s.name for s in ops] == per_chunk * program["chunks"]
    streams = [s.args["stream"] for s in ops]
    assert streams == [k % program["streams"] + 1 for k in range(program["chunks"])
                       for _ in per_chunk]
    assert all(a.end_s <= b.start_s for a, b in zip(ops, ops[1:], strict=False))  # in turn


@pytest.mark.distributed
@pytest.mark.timeout(240)
def test_recording_end_to_end_at_a_tiny_size(tmp_path):
    events, about = record_ddp(2, bucket_cap_mb=2 / 1024, dims=(16, 32, 32, 16))
    trace = profiles.load(write("ddp-tiny", events, about, tmp_path))
    assert ("rank 1", "main") in profiles.rows(trace)
    assert [b["layers"] for b in about["buckets"]] == [[2], [1], [0]]
    for process in ("rank 0", "rank 1"):
        run = profiles.spans(trace, ["gloo:all_reduce"], process=process)
        assert sorted(r.args["bucket"] for r in run) == [0, 1, 2]
        assert sorted(m.args["layer"] for m in _matmuls(trace, process)) == [0, 1, 2]
    events, about = record_mlp_step((6, 5, 4, 3), batch=3)
    trace = profiles.load(write("mlp-tiny", events, about, tmp_path))
    assert len(profiles.spans(trace, category="kernel launch")) == sum(
        KernelMLP((6, 5, 4, 3)).launches_per_step().values()) == 32


def test_a_profile_that_is_not_one_is_refused(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text('{"traceEvents": []}')
    with pytest.raises(ValueError, match="under 'gpudl'"):
        profiles.load(bad)
    bad.write_text('{"traceEvents": [{"ph": "X", "name": "a", "pid": 0, "tid": 0, "ts": 0, '
                   '"dur": -1}], "gpudl": {"profile": "a", "machine": {}, "date": ""}}')
    with pytest.raises(ValueError, match=r"traceEvents\[0\].*dur"):
        profiles.load(bad)
    with pytest.raises(ValueError, match="name"):
        profiles.path("nccl")


# --- on a GPU: the profiles topic (results/profiles-cuda.json) -------------------------------


@pytest.fixture(scope="module")
def gpu_record():
    from gpudl.bench import load_or_run

    return load_or_run("profiles")


@pytest.mark.gpu
def test_a_graph_replay_is_one_launch_where_the_eager_step_is_n(gpu_record):
    rows = {r["name"]: r for r in gpu_record["rows"]}
    eager, graph = rows["decode-eager-cuda"], rows["decode-graph-cuda"]
    counted = sum(gpu_record["profiles"]["decode-eager-cuda"]["gpudl"][
        "launches_per_step"].values())
    assert eager["launches"] == eager["kernels"] == counted > 1
    assert graph["launches"] == 0 and graph["graph_launches"] == 1
    assert graph["kernels"] == counted


@pytest.mark.gpu
def test_the_mlp_step_runs_on_the_gpu_the_kernels_the_model_counts(gpu_record):
    row = next(r for r in gpu_record["rows"] if r["name"] == "mlp-step-cuda")
    program = gpu_record["profiles"]["mlp-step-cuda"]["gpudl"]["program"]
    counted = sum(KernelMLP(tuple(program["sizes"])).launches_per_step().values())
    assert row["launches"] == row["kernels"] == counted


@pytest.mark.gpu
def test_a_copy_overlaps_a_kernel_of_the_other_stream_on_a_gpu(gpu_record):
    trace = gpu_record["profiles"]["streams-cuda"]
    copies = profiles.spans(trace, category="gpu_memcpy")
    kernels = profiles.spans(trace, category="kernel")
    assert any(c.thread != k.thread and c.overlap_s(k) > 0 for c in copies for k in kernels)


@pytest.mark.gpu
def test_a_chunks_kernel_takes_at_least_the_bandwidth_models_time(gpu_record):
    row = next(r for r in gpu_record["rows"] if r["name"] == "saxpy_v1_naive, one chunk")
    assert row["model_s"] is not None and row["min_s"] >= 0.9 * row["model_s"]
