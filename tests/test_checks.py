"""gpudl.checks: the input checks every module uses, and the comparisons that decide "equal" or
"within a bound", for which NaN is never within anything."""

import math

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from gpudl import checks

NAN, INF = math.nan, math.inf


@pytest.mark.parametrize("value", [NAN, INF, -INF])
def test_check_real_refuses_nan_and_infinities_by_default(value):
    with pytest.raises(ValueError, match="lr"):
        checks.check_real("lr", value)
    if not math.isnan(value):
        assert checks.check_real("lr", value, finite=False) == value
    with pytest.raises(ValueError, match="NaN|nan"):
        checks.check_real("lr", NAN, finite=False)


@pytest.mark.parametrize(("value", "error"), [(None, TypeError), ("0.1", TypeError),
                                              (True, TypeError), ([0.1], TypeError),
                                              (np.bool_(True), TypeError), (-1.0, ValueError),
                                              (0.0, ValueError)])
def test_check_positive_names_the_argument(value, error):
    with pytest.raises(error, match="lr"):
        checks.check_positive("lr", value)


def test_check_int_has_a_range():
    assert checks.check_int("n", np.int64(3), 1, 3) == 3
    with pytest.raises(ValueError, match="n must be <= 3"):
        checks.check_int("n", 4, 1, 3)
    with pytest.raises(TypeError, match="n must be an int"):
        checks.check_int("n", np.bool_(True))


def test_check_choice_tells_a_wrong_type_from_a_wrong_name():
    with pytest.raises(TypeError, match="variant"):
        checks.check_choice("variant", None, ("v1", "v2"))
    with pytest.raises(TypeError, match="variant"):
        checks.check_choice("variant", ["v1"], ("v1", "v2"))  # not "unhashable type"
    with pytest.raises(ValueError, match="variant must be one of"):
        checks.check_choice("variant", "v3", ("v1", "v2"))
    with pytest.raises(TypeError, match="dtype"):
        checks.check_choice("dtype", "float32", (torch.float32,))
    assert checks.check_choice("dtype", torch.float32, (torch.float32,)) is torch.float32
    with pytest.raises(ValueError, match=r"row must be one of \[\], got 'a'"):
        checks.check_choice("row", "a", ())  # nothing to choose from


def test_check_kernel_array_takes_one_dtype_or_a_tuple():
    chain = np.zeros(4, np.int64)
    assert checks.check_kernel_array("chain", chain, 1, (np.int32, np.int64)) is False
    with pytest.raises(TypeError, match="chain must have dtype int32, got int64"):
        checks.check_kernel_array("chain", chain, 1, np.int32)
    with pytest.raises(TypeError, match="chain must have dtype int32 or int64, got float32"):
        checks.check_kernel_array("chain", chain.astype(np.float32), 1, (np.int32, np.int64))


def test_sequences_and_mappings_of_numbers():
    assert checks.check_ints("sizes", [3, 0], 0) == (3, 0)
    with pytest.raises(ValueError, match=r"sizes\[1\]"):
        checks.check_ints("sizes", [3, -1], 0)
    with pytest.raises(TypeError, match="sizes"):
        checks.check_ints("sizes", "3,1", 0)
    with pytest.raises(ValueError, match=r"times\[0\]"):
        checks.check_reals("times", [NAN, 1.0])
    with pytest.raises(ValueError, match=r"groups\['a'\]\['b'\]"):
        checks.check_real_mapping("groups", {"a": {"b": INF}}, 0)


@given(st.lists(st.floats(allow_nan=False), min_size=1), st.integers(0, 10))
def test_largest_is_nan_when_any_value_is(values, where):
    assert checks.largest(values) == max(values)
    with_nan = values[:where] + [NAN] + values[where:]
    assert math.isnan(checks.largest(with_nan))  # max(0.0, nan) would be 0.0
    assert math.isnan(checks.largest([np.array(values), np.array([1.0, NAN])]))
    assert math.isnan(checks.largest([torch.tensor([1.0, NAN])]))


def test_largest_difference_and_within():
    a = np.ones(4)
    assert checks.largest_difference(a, a) == 0.0
    assert checks.largest_difference([INF, 1.0], [INF, 2.0]) == 1.0  # the same infinity
    assert math.isnan(checks.largest_difference(a, np.array([1, 1, NAN, 1])))
    assert math.isnan(checks.largest_difference(torch.ones(2), torch.tensor([NAN, 1.0])))
    with pytest.raises(ValueError, match="shape"):
        checks.largest_difference(a, np.ones(3))
    assert checks.within(1e-7, 1e-6) and not checks.within(NAN, 1e-6)
    assert not checks.within(1e-6, NAN) and not checks.within(INF, 1e-6)


def test_one_line_argument_errors(capsys):
    parser = checks.OneLineArgumentParser(prog="prog")
    parser.add_argument("n", type=int)
    with pytest.raises(SystemExit) as err:
        parser.parse_args(["x"])
    assert err.value.code == 2
    assert capsys.readouterr().err.splitlines() == [
        "prog: error: argument n: invalid int value: 'x'"]
    assert checks.fail("prog", "two\nlines") == 2
    assert capsys.readouterr().err == "prog: error: two lines\n"
