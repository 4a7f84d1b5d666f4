"""The variants of each operation are declared once, on their launchers (gpudl.registry.variant):
keys ``vN_what`` numbered from v1, one name ``<family>_<key>`` shared with the kernels they launch,
and every module's ``VARIANTS`` table read from the registry."""

import math

import pytest

from gpudl import registry
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
    tensor_core_matmul,
    transpose,
)

TABLES = {"vector_add": elementwise.VARIANTS, "saxpy": elementwise.SAXPY_VARIANTS,
          "copy": memory.COPY_VARIANTS, "transpose": transpose.VARIANTS,
          "reduce": reduction.VARIANTS, "matmul": matmul.VARIANTS,
          "tensor_core": tensor_core_matmul.VARIANTS, "quant": quant.VARIANTS,
          "buckets": buckets.VARIANTS, "adam": optim.VARIANTS,
          "attention": attention.VARIANTS, "decode": decode.VARIANTS}


def test_every_module_table_is_the_registry_s():
    registry.load_all()
    for family, table in TABLES.items():
        assert table == registry.variants(family), family
    assert set(TABLES) <= set(registry.VARIANTS)


def test_keys_are_numbered_from_v1_and_name_the_kernels_they_launch():
    kernels = registry.load_all()
    for family, records in registry.VARIANTS.items():
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
