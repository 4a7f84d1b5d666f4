"""The variants of each operation are declared once, on their launchers (gpudl.registry.variant):
keys ``vN_what`` numbered from v1, one name ``<family>_<key>`` shared with the kernels they launch,
and every module's ``VARIANTS`` table read from the registry."""

import math

import numpy as np
import pytest

from gpudl import registry

# isort: split
from numba import cuda, float32

from gpudl.bench import elementwise as elementwise_bench
from gpudl.kernels import (
    attention,
    buckets,
    decode,
    elementwise,
    matmul,
    memory,
    optim,
    quant,
    reduction,
    softmax,
    tensor_core_matmul,
    transpose,
)

TABLES = {"vector_add": elementwise.VARIANTS, "saxpy": elementwise.SAXPY_VARIANTS,
          "copy": memory.COPY_VARIANTS, "transpose": transpose.VARIANTS,
          "reduce": reduction.VARIANTS, "matmul": matmul.VARIANTS,
          "tensor_core": tensor_core_matmul.VARIANTS, "quant": quant.VARIANTS,
          "buckets": buckets.VARIANTS, "adam": optim.VARIANTS,
          "attention": attention.VARIANTS, "decode": decode.VARIANTS,
          "softmax": softmax.VARIANTS}


def test_every_module_table_is_the_registry_s():
    registry.load_all()
    for family, table in TABLES.items():
        assert table == registry.variants(family), family
    assert set(TABLES) <= set(registry.VARIANTS)


def test_keys_are_numbered_from_v1_and_name_the_kernels_they_launch():
    kernels = registry.load_all()
    for family, records in registry.VARIANTS.items():
        assert not set(records) & set(registry.ABSENT.get(family, {}))
        for number, (key, v) in enumerate(records.items(), start=1):
            assert registry.VARIANT_KEY.fullmatch(key) and key.startswith(f"v{number}_"), key
            assert v.name == f"{family}_{key}"
            for name in v.kernels:
                assert name in kernels, f"{v.name} launches unregistered {name}"
                assert name.startswith(f"{family}_v{number}_"), name


def test_bytes_and_flops_per_element_are_the_benchmarks_figures():
    v = registry.variant_records("vector_add")["v2_grid_stride"]
    assert (v.bytes_per_element, v.flops_per_element) == (12, 1)  # two loads, one store
    assert registry.variant_records("copy")["v3_vector4"].bytes_per_element == 8
    assert registry.variant_records("matmul")["v1_naive"].bytes_per_element is None


def test_every_family_extended_in_triton_has_a_triton_variant_where_triton_is_installed():
    families = ("vector_add", "reduce", "softmax", "matmul", "adam", "attention", "decode")
    registry.load_all()
    if not registry.installed("triton"):
        pytest.skip("triton is not installed: its variants are absent (registry.ABSENT)")
    for family in families:
        kinds = [v.kind for v in registry.variant_records(family).values()]
        assert "triton" in kinds and kinds[0] == "numba", family
        for key, v in registry.variant_records(family).items():
            assert (v.kind == "triton") == ("_triton_" in key), v.name


def test_a_variant_whose_package_is_missing_is_absent_keeps_its_number_and_is_refused(
        monkeypatch):
    monkeypatch.setattr(registry, "installed", lambda package: False)
    monkeypatch.setitem(registry.VARIANTS, "t_family", {})
    monkeypatch.setitem(registry.ABSENT, "t_family", {})
    registry.variant("t_family", "v1_tiles", requires="triton")(_launch)
    assert registry.VARIANTS["t_family"] == {}
    assert registry.ABSENT["t_family"]["v1_tiles"].requires == "triton"
    with pytest.raises(ValueError, match="must start with 'v2_'"):
        registry.variant("t_family", "v1_other")(_launch)
    with pytest.raises(ModuleNotFoundError, match="needs the package 'triton'.*pip install"):
        registry.check_variant("t_family", "v1_tiles", {})
    with pytest.raises(ValueError, match="variant must be one of"):
        registry.check_variant("t_family", "v9_nothing", {"v2_x": None})


def _launch(*args):
    return None


@pytest.mark.parametrize(("call", "error", "message"), [
    (lambda: registry.variant("t", "v2"), ValueError, "vN_what"),
    (lambda: registry.variant("t", "naive"), ValueError, "vN_what"),
    (lambda: registry.variant("two words", "v1_x"), ValueError, "family must be an identifier"),
    (lambda: registry.variant(3, "v1_x"), TypeError, "family must be a str"),
    (lambda: registry.variant("t", "v1_x", kernels=()), ValueError, "kernels"),
    (lambda: registry.variant("t", "v1_x", kernels=("a b",)), ValueError, "kernels"),
    (lambda: registry.variant("t", "v1_x", bytes_per_element=-1), ValueError,
     "bytes_per_element"),
    (lambda: registry.variant("t", "v1_x", flops_per_element=math.nan), ValueError,
     "flops_per_element"),
    (lambda: registry.variant("t", "v1_x")(7), TypeError, "above a launcher"),
    (lambda: registry.variant("vector_add", "v99_more")(_launch), ValueError,
     "must start with 'v[0-9]+_'"),
    (lambda: registry.variant("vector_add", "v1_naive")(_launch), ValueError, "is taken by"),
    (lambda: registry.variants("no_such_family"), KeyError, "family must be one of"),
])
def test_bad_declarations_are_refused_naming_the_argument(call, error, message):
    before = {family: dict(records) for family, records in registry.VARIANTS.items()}
    with pytest.raises(error, match=message):
        call()
    assert registry.VARIANTS == before


def _half_add(a, b, out):
    i = cuda.grid(1)
    if i < out.size:
        out[i] = float32(a[i]) + float32(b[i])  # rounded to float16 as it is stored


def _writes_nothing(a, b, out, threads_per_block):
    return None


def _declare_float16_variant(monkeypatch, launch) -> None:
    """A fifth vector add on float16 vectors, declared for this test only (the registry's tables
    are restored after it)."""
    kernel = registry.Kernel("vector_add_v5_float16", __name__, "_half_add",
                             ((None, "void(float16[::1], float16[::1], float16[::1])"),),
                             "a test", None, "float16", 256)
    variant = registry.Variant("vector_add", "v5_float16", launch, (kernel.name,), 6, 1)
    monkeypatch.setitem(registry.KERNELS, kernel.name, kernel)
    monkeypatch.setitem(registry.VARIANTS, "vector_add",
                        registry.VARIANTS["vector_add"] | {variant.key: variant})
    monkeypatch.setitem(elementwise.VARIANTS, variant.key, launch)


def test_a_float16_variant_is_checked_allocated_and_benchmarked_in_float16(monkeypatch):
    half_add = cuda.jit(_half_add)

    def launch(a, b, out, threads_per_block):
        half_add[-(-out.size // threads_per_block), threads_per_block](a, b, out)

    _declare_float16_variant(monkeypatch, launch)
    a, b = (np.linspace(-3, 3, 500).astype(np.float16), np.linspace(1, 2, 500).astype(np.float16))
    out = elementwise.vector_add(a, b, variant="v5_float16")
    assert out.dtype == np.float16 and np.array_equal(out, a + b)  # NumPy rounds once too
    with pytest.raises(TypeError, match="a must have dtype float16, got float32"):
        elementwise.vector_add(a.astype(np.float32), b.astype(np.float32), variant="v5_float16")
    rows = {r["name"]: r for r in elementwise_bench.run(n=300, repeats=1)["rows"]}
    assert rows["vector_add_v5_float16"]["bytes"] == 6 * 300
    assert rows["vector_add_v5_float16"]["precision"] == "float16"


def test_the_benchmark_catches_a_variant_that_writes_nothing(monkeypatch):
    _declare_float16_variant(monkeypatch, _writes_nothing)  # its output stays poisoned (NaN)
    with pytest.raises(RuntimeError, match="vector_add_v5_float16: a sum is off"):
        elementwise_bench.run(n=300, repeats=1)
