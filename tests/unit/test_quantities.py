"""Kubernetes quantities as the API server parses them, bounded before any arithmetic."""

from __future__ import annotations

from decimal import Decimal

import pytest
from hypothesis import given
from hypothesis import strategies as st

from resource_contract.quantities import (
    MAX_LENGTH,
    int_value,
    milli_value,
    parse_quantity,
)


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("1500m", Decimal("1.5")),
        ("2", Decimal(2)),
        ("0.5", Decimal("0.5")),
        (".5", Decimal("0.5")),
        ("5.", Decimal(5)),
        ("+1", Decimal(1)),
        ("-1", Decimal(-1)),
        ("1Ki", Decimal(1024)),
        ("1Gi", Decimal(1 << 30)),
        ("1.5Gi", Decimal(3 << 29)),
        ("1k", Decimal(1000)),
        ("1M", Decimal(10**6)),
        ("100n", Decimal("1e-7")),
        ("1e3", Decimal(1000)),
        ("1E-3", Decimal("0.001")),
        (2, Decimal(2)),
        (0.5, Decimal("0.5")),
    ],
)
def test_the_api_servers_forms(text: object, value: Decimal) -> None:
    assert parse_quantity(text) == value


@pytest.mark.parametrize(
    "text",
    ["", "1K", "1ki", "1Mb", "NaN", "Infinity", "1_000", " 1", "1 ", "1e", "e3", "0x10", "1.2.3"],
)
def test_malformed_quantities_are_refused(text: str) -> None:
    with pytest.raises(ValueError, match="invalid quantity"):
        parse_quantity(text)


@pytest.mark.parametrize("value", [True, None, [], {}])
def test_values_that_are_not_quantities_are_refused(value: object) -> None:
    with pytest.raises(ValueError, match="invalid quantity"):
        parse_quantity(value)


@pytest.mark.parametrize(
    "text", ["1e999990", "1e24", "9999999999999999999999999", "10000000E", "1000000Ei"]
)
def test_absurd_magnitudes_are_refused_before_any_arithmetic(text: str) -> None:
    # `1e999990` once cost 20 s of big-integer arithmetic in CreateContainer: refused by its
    # exponent alone, before a number of a million digits is ever built.
    with pytest.raises(ValueError, match="out of range"):
        parse_quantity(text)
    with pytest.raises(ValueError, match="out of range"):
        milli_value(text)


def test_long_strings_are_refused_unread() -> None:
    with pytest.raises(ValueError, match=f"longer than {MAX_LENGTH}"):
        parse_quantity("1" * (MAX_LENGTH + 1))


def test_tiny_exponents_round_up_to_the_smallest_unit() -> None:
    assert milli_value("1e-999999") == 1
    assert milli_value("-1e-999999") == 0
    assert parse_quantity("0e-999999") == 0


# Up to 10^14: times Gi (2^30) stays below the parser's bound of 10^24, tested on its own above.
@given(st.integers(min_value=0, max_value=10**14), st.sampled_from(["", "m", "k", "Mi", "Gi"]))
def test_milli_and_int_values_round_up(n: int, suffix: str) -> None:
    value = parse_quantity(f"{n}{suffix}")
    assert milli_value(f"{n}{suffix}") >= value * 1000 > milli_value(f"{n}{suffix}") - 1
    assert int_value(f"{n}{suffix}") >= value > int_value(f"{n}{suffix}") - 1


def _by_the_grammar(value: str) -> Decimal:
    """The quantity as the grammar reads it, the whole way (the parser reads the usual forms
    without its regular expression)."""
    from resource_contract import quantities as q

    match = q._QUANTITY.fullmatch(value)
    if match is None or value != value.strip() or len(value) > MAX_LENGTH:
        raise ValueError(value)
    number = Decimal(match["number"])
    if match["binary"]:
        return q._bounded(number * 1024 ** (q._BINARY_SUFFIXES.index(match["binary"]) + 1), value)
    suffix = match["exponent"]
    exponent = int(suffix[1:]) if suffix else q._DECIMAL[match["decimal"] or ""]
    if number and number.adjusted() + exponent >= q.MAX_EXPONENT:
        raise ValueError(value)
    if exponent < -q.MAX_EXPONENT:
        return Decimal(0) if not number else Decimal("1e-9").copy_sign(number)
    return number.scaleb(exponent)


usual_forms = st.builds(
    lambda digits, unit: digits + unit,
    st.from_regex(r"[0-9]{1,30}", fullmatch=True) | st.text("0123456789٣²", min_size=1, max_size=4),
    st.sampled_from(
        [
            "",
            "Ki",
            "Mi",
            "Gi",
            "Ti",
            "Pi",
            "Ei",
            "n",
            "u",
            "m",
            "k",
            "M",
            "G",
            "T",
            "P",
            "E",
            "i",
            "Kj",
        ]
    ),
)


@given(usual_forms | st.text(max_size=8))
def test_the_usual_forms_read_as_the_grammar_reads_them(value: str) -> None:
    from resource_contract.quantities import _parse

    try:
        expected: Decimal | None = _by_the_grammar(value)
    except (ValueError, ArithmeticError):
        expected = None
    try:
        got: Decimal | None = _parse(value)
    except ValueError:
        got = None
    assert got == expected and str(got) == str(expected), value
