"""Kubernetes resource quantities ("1500m", "1Gi", 2), parsed by the API server's grammar.

Pure and bounded: a quantity's magnitude is checked before anything is computed from it, so an
annotation such as `1e999990` is refused at once instead of costing seconds of arithmetic.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from decimal import Decimal, InvalidOperation
from typing import Any

# No node has 10^24 bytes or CPUs; anything at or above is refused as out of range.
MAX_EXPONENT = 24
MAX_QUANTITY = Decimal(10) ** MAX_EXPONENT
# Longer strings are refused before they are parsed (the API server's canonical forms are short).
MAX_LENGTH = 64

# <signedNumber><suffix>, suffix: binary SI, decimal SI, or a decimal exponent (e/E<signed int>).
_QUANTITY = re.compile(  # ASCII digits only: Kubernetes refuses others
    r"(?P<number>[+-]?(?:\d+\.?\d*|\.\d+))"
    r"(?:(?P<binary>[KMGTPE]i)|(?P<exponent>[eE][+-]?\d+)|(?P<decimal>[numkMGTPE]?))",
    re.ASCII,
)
# The binary suffixes' factors (1024^n), as Decimals: exact, and no power taken per parse.
_BINARY_SUFFIXES = ("Ki", "Mi", "Gi", "Ti", "Pi", "Ei")
_BINARY = {s: Decimal(1024**n) for n, s in enumerate(_BINARY_SUFFIXES, 1)}
_DECIMAL = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}


# Quantity strings parsed already (Decimals are immutable): pods of one Deployment, and the
# containers of a node, repeat the same few. At most _MEMO_ENTRIES strings of at most
# MAX_LENGTH characters (under 1 MiB); emptied when full.
_MEMO: dict[str, Decimal] = {}
_MEMO_ENTRIES = 4096
# The strings parsed already, for a caller's hot loop to look up before calling
# parse_quantity (read only; a string not in it may still be valid).
PARSED: Mapping[Any, Decimal] = _MEMO


def parse_quantity(value: object) -> Decimal:
    """A Kubernetes quantity as a Decimal; ValueError naming the problem when malformed."""
    if type(value) is str:
        found = _MEMO.get(value)
        if found is not None:
            return found
        number = _parse(value)
        if len(_MEMO) >= _MEMO_ENTRIES:
            _MEMO.clear()
        _MEMO[value] = number
        return number
    return _parse(value)


_NUMBERS = (int, float, Decimal)  # a tuple: `int | float | Decimal` is built at every call


def _parse(value: object) -> Decimal:
    if isinstance(value, bool):
        raise ValueError(f"invalid quantity {value!r}: not a number")
    if isinstance(value, _NUMBERS):
        number = Decimal(value)
        if not number.is_finite():
            raise ValueError(f"invalid quantity {value!r}: not a finite number")
        return _bounded(number, value)
    if not isinstance(value, str):
        raise ValueError(f"invalid quantity {value!r}: not a string or a number")
    if len(value) > MAX_LENGTH:
        raise ValueError(f"invalid quantity {value[:20]!r}...: longer than {MAX_LENGTH} characters")
    # The usual forms, ASCII digits with a unit or none (`1048576Ki`, `500m`, `2`), are read
    # without the regular expression; everything else through it. The same result either way.
    digits = value[:-2]
    if value[-2:] in _BINARY and digits.isdigit() and digits.isascii():
        return _bounded(Decimal(digits) * _BINARY[value[-2:]], value)
    if value.isdigit() and value.isascii():
        number, exponent = Decimal(value), 0
    elif value[-1:] in _DECIMAL and (digits := value[:-1]).isdigit() and digits.isascii():
        number, exponent = Decimal(digits), _DECIMAL[value[-1]]
    else:
        if value != value.strip():
            raise ValueError(f"invalid quantity {value!r}: surrounding whitespace")
        match = _QUANTITY.fullmatch(value)
        if match is None:
            raise ValueError(f"invalid quantity {value!r}")
        try:
            number = Decimal(match["number"])
        except InvalidOperation:
            raise ValueError(f"invalid quantity {value!r}") from None
        if match["binary"]:
            return _bounded(number * _BINARY[match["binary"]], value)
        suffix = match["exponent"]
        exponent = int(suffix[1:]) if suffix else _DECIMAL[match["decimal"] or ""]
    # Checked before scaling: the exponent alone may be absurd.
    if number and number.adjusted() + exponent >= MAX_EXPONENT:
        raise ValueError(f"invalid quantity {value!r}: out of range (at least 10^{MAX_EXPONENT})")
    if exponent < -MAX_EXPONENT:
        # Smaller than any unit Kubernetes counts in (nano): a positive value rounds up to 1n.
        return Decimal(0) if not number else Decimal("1e-9").copy_sign(number)
    return number.scaleb(exponent)


def _bounded(number: Decimal, value: object) -> Decimal:
    if abs(number) >= MAX_QUANTITY:
        raise ValueError(f"invalid quantity {value!r}: out of range (at least 10^{MAX_EXPONENT})")
    return number


def milli_value(value: object) -> int:
    """A quantity in thousandths, rounded up (resource.Quantity.MilliValue())."""
    return math.ceil(parse_quantity(value) * 1000)


def int_value(value: object) -> int:
    """A quantity as an integer, rounded up (resource.Quantity.Value())."""
    return math.ceil(parse_quantity(value))
