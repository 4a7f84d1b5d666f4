"""gpudl.ptx: the PTX of the bytes-in-flight variants for sm_90 shows what Chapter 2 says it
does (K loads issued before the first store, 16-byte vector loads, unsigned index compares, no
float64), the chapter's quoted lines are what the command prints now, and ``python -m gpudl
ptx`` works or says why not. Skipped, with the reason, where the CUDA compiler pieces are
missing."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from gpudl import ptx
from gpudl.kernels.elementwise import VECTORS, K
from gpudl.kernels.reduction import LOADS

ROOT = Path(__file__).resolve().parent.parent
QUOTED = ROOT / "book" / "ptx"  # the lines Chapter 2 quotes, one file per kernel
NEW = ["copy_v2_k_loads", "copy_v3_vector4", "vector_add_v3_k_loads", "vector_add_v4_vector4",
       "saxpy_v2_k_loads", "transpose_v4_padded_loads_first", "reduce_v7_last_block"]
OLD = ["copy_v1_naive", "vector_add_v2_grid_stride", "reduce_v6_one_pass_atomic"]
OTHERS = ["timing_hold", "adam_v4_multi_tensor"]  # compiled for sm_90 too (the simulator checks
# no types): the GPU-only sleep of gpudl.bench.timing, and the optimizer's one launch
CH09 = [name for name, entry in ptx.kernels().items()  # Chapter 9's Numba kernels (the graph's
        # two run on GPUs only)
        if name.startswith(("decode_", "paged_", "quant_", "decoder_", "ch09_"))
        and entry.kind == "numba"]


@pytest.fixture(scope="module")
def texts() -> dict[str, str]:
    try:
        return ptx.ptx_many(NEW + OLD + OTHERS + CH09)
    except ptx.ToolkitMissing as error:
        pytest.skip(f"the CUDA compiler pieces are not installed: {error}")


def loads_before_first_store(text: str, store: str = "st.global") -> list[str]:
    memory = ptx.memory_instructions(text)
    first = next(i for i, line in enumerate(memory) if line.startswith(store))
    return [line for line in memory[:first] if line.startswith("ld.global")]


def test_every_kernel_is_for_sm_90_and_has_no_float64(texts):
    for name, text in texts.items():
        assert ".target sm_90" in text, name
        assert not re.search(r"\.f64\b", text), name  # (a register may be called %f64)


@pytest.mark.parametrize(("name", "loads"), [("copy_v2_k_loads", K),
                                              ("vector_add_v3_k_loads", 2 * K),
                                              ("saxpy_v2_k_loads", 2 * K)])
def test_the_k_loads_variants_issue_every_load_before_the_first_store(texts, name, loads):
    before = loads_before_first_store(texts[name])
    assert len(before) == loads and all(line.startswith("ld.global.f32") for line in before)


def test_one_element_per_thread_has_one_load_in_flight(texts):
    for name in ("copy_v1_naive", "vector_add_v2_grid_stride"):
        assert len(loads_before_first_store(texts[name])) == (1 if name == "copy_v1_naive" else 2)


@pytest.mark.parametrize(("name", "loads"), [("copy_v3_vector4", VECTORS),
                                              ("vector_add_v4_vector4", 2 * VECTORS)])
def test_the_vector_variants_load_and_store_16_bytes_at_a_time(texts, name, loads):
    before = loads_before_first_store(texts[name])
    assert len(before) == loads and all(line.startswith("ld.global.v4.f32") for line in before)
    stores = [line for line in ptx.memory_instructions(texts[name]) if line.startswith("st.")]
    assert stores[0].startswith("st.global.v4.f32")
    assert any(line.startswith("ld.global.f32") for line in ptx.body(texts[name]))  # the tail


def test_unsigned_indices_drop_the_negative_index_wraparound(texts):
    """copy v1's signed index is wrapped like a Python index (shift right by 63, and with the
    length, add); copy v2 compares unsigned, and has no such step."""
    v1, v2 = (ptx.body(texts[name]) for name in ("copy_v1_naive", "copy_v2_k_loads"))
    assert any(line.startswith("shr.s64") and line.endswith(", 63;") for line in v1)
    assert any(line.startswith("setp.ge.s64") for line in v1)
    assert not any(line.startswith("shr.s64") for line in v2)
    assert any(re.match(r"setp\.\w+\.u64", line) for line in v2)
    assert not any(re.match(r"setp\.\w+\.s64", line) for line in v2)


def test_the_transpose_loads_its_rows_before_storing_them_in_the_tile(texts):
    before = loads_before_first_store(texts["transpose_v4_padded_loads_first"], "st.shared")
    assert len(before) == 8


def _loop(text: str) -> list[str]:
    """The instructions of the first loop of a kernel: from a label to the branch back."""
    lines = ptx.body(text)
    for i, line in enumerate(lines):
        if line.startswith("$L__") and line.endswith(":"):
            label = line[:-1]
            for j in range(i + 1, len(lines)):
                if lines[j].endswith(f"bra {label};") or lines[j].endswith(f"bra \t{label};"):
                    return lines[i + 1:j + 1]
    raise AssertionError("no loop found")


def test_the_reduction_loop_loads_eight_values_per_trip_into_four_chains(texts):
    v7 = _loop(texts["reduce_v7_last_block"])
    loads = [line for line in v7 if line.startswith("ld.global.f32")]
    assert len(loads) == LOADS and not any(line.startswith("st.") for line in v7)
    adds = [re.match(r"add\.f32\s+(%f\d+), (%f\d+), (%f\d+);", line) for line in v7]
    chains = {m.group(1) for m in adds if m}  # the registers the loop adds into
    assert len(chains) >= 8  # 2 additions per accumulator per trip, 4 accumulators


def test_ptxas_schedules_the_reduction_loads_before_the_additions(texts):
    try:
        machine = ptx.sass(texts["reduce_v7_last_block"])
    except ptx.ToolkitMissing as error:
        pytest.skip(str(error))
    ops = [m.group(1) for m in re.finditer(r"\s(LDG|FADD)\b", machine)]
    assert ops[:LOADS] == ["LDG"] * LOADS


def _quoted(path: Path) -> tuple[str, str, tuple[int, int]]:
    """A quoted file's kernel, mode and target: ``NAME.MODE[.sm_XY].txt`` (sm_90 by
    default)."""
    name, mode, *target = path.stem.split(".")
    cc = (9, 0) if not target else (int(target[0][3:-1]), int(target[0][-1]))
    return name, mode, cc


@pytest.fixture(scope="module")
def quoted_texts(texts) -> dict[tuple[str, tuple[int, int]], str]:
    """The PTX of every quoted kernel for its target, one compile per target (a Triton
    kernel's only where Triton is installed)."""
    from gpudl import registry

    wanted: dict[tuple[int, int], list[str]] = {}
    for path in sorted(QUOTED.glob("*.txt")):
        name, _, cc = _quoted(path)
        if ptx.kernels()[name].kind == "numba" or registry.installed("triton"):
            wanted.setdefault(cc, []).append(name)
    return {(name, cc): text for cc, names in wanted.items()
            for name, text in ptx.ptx_many(sorted(set(names)), cc).items()}


@pytest.mark.parametrize("path", [
    pytest.param(p, marks=[pytest.mark.triton] * (ptx.kernels()[_quoted(p)[0]].kind == "triton"))
    for p in sorted(QUOTED.glob("*.txt"))], ids=lambda p: p.stem)
def test_the_quoted_ptx_is_what_the_command_prints_now(quoted_texts, path):
    name, mode, cc = _quoted(path)
    text = quoted_texts[(name, cc)]
    lines = {"memory": ptx.memory_instructions, "body": ptx.body,
             "counts": lambda t: [f"{n:5} {op}" for n, op in ptx.instruction_counts(t)]}[mode](
        text)
    option = f"--{mode}" + ("" if cc == (9, 0) else f" --cc {cc[0]}.{cc[1]}")
    assert path.read_text().splitlines() == [f"// {name} (sm_{cc[0]}{cc[1]})", *lines], (
        f"regenerate with: python -m gpudl ptx {name} {option} > {path}")


def test_the_quoted_files_exist():
    assert {p.name for p in QUOTED.glob("*.txt")} >= {
        "copy_v1_naive.body.txt", "copy_v2_k_loads.memory.txt",
        "vector_add_v4_vector4.memory.txt", "vector_add_v1_naive.memory.txt",
        "vector_add_v5_triton_block.memory.txt", "matmul_v5_register_2d.counts.txt",
        "matmul_v7_triton_float16.counts.txt", "matmul_v7_triton_float16.counts.sm_80.txt"}


def _counts(path: Path) -> dict[str, int]:
    """A stored ``--counts`` file as instruction -> count."""
    return {op: int(n) for n, op in (line.split() for line in path.read_text().splitlines()[1:])}


def test_the_stored_ptx_shows_what_triton_emits_that_the_numba_twins_do_not():
    """The facts Chapters 2 and 3 quote, read from the stored files (the test above holds them
    to what the compilers emit now): Triton's vector add loads 16 bytes per instruction where
    its twin loads 4; Triton's float16 matmul copies its tiles with cp.async in pipeline stages,
    loads its fragments with ldmatrix and multiplies with mma.sync (sm_80) or wgmma (sm_90a),
    none of which the hand-written v5_register_2d holds (4-byte loads, FMAs)."""
    triton_add = (QUOTED / "vector_add_v5_triton_block.memory.txt").read_text()
    numba_add = (QUOTED / "vector_add_v1_naive.memory.txt").read_text()
    assert triton_add.count("ld.global.v4.b32") == 4 and "st.global.v4.b32" in triton_add
    assert ".v4" not in numba_add and numba_add.count("ld.global.f32") == 2
    sm90 = _counts(QUOTED / "matmul_v7_triton_float16.counts.txt")
    sm80 = _counts(QUOTED / "matmul_v7_triton_float16.counts.sm_80.txt")
    twin = _counts(QUOTED / "matmul_v5_register_2d.counts.txt")
    for counts in (sm80, sm90):
        assert counts["cp.async.cg.shared.global"] > 0 and counts["cp.async.commit_group"] >= 2
        assert any(op.startswith("ldmatrix") for op in counts)
    assert sm80["mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32"] == 128
    assert sm90["wgmma.mma_async.sync.aligned.m64n256k16.f32.f16.f16"] == 4
    assert not any("wgmma" in op for op in sm80)  # Hopper's warpgroup products: sm_90a only
    assert not any(op.startswith(("cp.async", "ldmatrix", "mma", "wgmma")) for op in twin)
    assert twin["fma.rn.f32"] == 64 and twin["ld.global.f32"] == 8


def test_the_command_prints_ptx_for_another_cc(texts):
    done = subprocess.run([sys.executable, "-m", "gpudl", "ptx", "copy_v1_naive", "--cc", "8.0"],
                          capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert done.returncode == 0, done.stderr
    assert ".target sm_80" in done.stdout and "ld.global.f32" in done.stdout


def test_the_command_lists_its_kernels_and_refuses_unknown_ones():
    done = subprocess.run([sys.executable, "-m", "gpudl", "ptx", "--list"], capture_output=True,
                          text=True, cwd=ROOT, timeout=300)
    assert done.returncode == 0 and "copy_v2_k_loads" in done.stdout
    done = subprocess.run([sys.executable, "-m", "gpudl", "ptx", "no_such_kernel"],
                          capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert done.returncode == 2 and "got 'no_such_kernel'" in done.stderr
    assert "names[0] must be one of" in done.stderr


def test_without_the_compiler_pieces_the_command_says_what_to_install(monkeypatch, capsys):
    def missing(names, cc):
        raise ptx.ToolkitMissing("NVVM (libnvvm) was not found")

    monkeypatch.setattr(ptx, "ptx_many", missing)
    assert ptx.main(["copy_v1_naive"]) == 2
    err = capsys.readouterr().err
    assert "cannot compile to PTX: NVVM (libnvvm) was not found" in err
    assert "pip install -e '.[gpu]'" in err


def test_bad_compute_capabilities_are_refused():
    with pytest.raises(TypeError, match="cc must be a"):
        ptx.ptx_many(["copy_v1_naive"], cc="9.0")
    with pytest.raises(ValueError, match=r"cc\[1\] must be >= 0"):
        ptx.ptx_many(["copy_v1_naive"], cc=(9, -1))
    with pytest.raises(SystemExit):
        ptx.main(["copy_v1_naive", "--cc", "sm90"])


def test_the_vector_intrinsics_refuse_what_is_not_a_float32_vector(texts):
    script = (
        "import gpudl\n"
        "from gpudl import ptx\n"
        "from gpudl.kernels import wide\n"
        "from numba import cuda\n"
        "def bad(x):\n"
        "    wide.load4(x, 0)\n"
        "try:\n"
        "    ptx.prepare_compiler()\n"
        "    from numba.cuda import dispatcher\n"
        "    dispatcher.get_current_device = lambda: ptx.CompileTarget((9, 0))\n"
        "    cuda.compile_ptx(bad, 'void(float64[::1])', cc=(9, 0))\n"
        "except Exception as error:\n"
        "    print(type(error).__name__, error)\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          cwd=ROOT, timeout=300, env={**os.environ, "GPUDL_BACKEND": "compile"})
    assert "a 16-byte access needs a 1-D float32 array and an integer index, got " \
           "array(float64" in done.stdout, done.stdout + done.stderr
