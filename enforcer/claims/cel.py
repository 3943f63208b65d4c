"""Device selectors: the CEL expressions of DeviceClasses and requests, evaluated on one device
with cel-python, in the environment resource.k8s.io/v1 gives them.

The variable `device` has `driver`, `allowMultipleAllocations`, `attributes` and `capacity`;
`device.attributes["DOMAIN"].NAME` reads an attribute (a domain the device lacks reads as an
empty map; a name it lacks is an error that aborts the allocation, as in the scheduler).
Quantities (`device.capacity[...]`, `quantity("2")`) take `compareTo`, `isGreaterThan`,
`isLessThan`, `asInteger`, `asApproximateFloat`, `sign` and `isInteger`; versions
(`semver("1.2.3")` and version attributes) take `compareTo`, `isGreaterThan`, `isLessThan`,
`major`, `minor` and `patch`. Any other Kubernetes CEL extension is refused by name.
"""

from __future__ import annotations

import re
from collections import OrderedDict
from collections.abc import Callable, Mapping
from decimal import Decimal
from typing import Any, cast

import celpy
from celpy import celtypes

from enforcer.claims.model import Device
from resource_contract.quantities import parse_quantity

_CACHE_SIZE = 256
_UNDECLARED = re.compile(r"undeclared reference to '([^']+)'")


class SelectorError(ValueError):
    """An expression that does not compile, uses what is not supported, or fails on a device."""


class _Quantity(celtypes.DoubleType):
    """A Kubernetes quantity (kept exact beside the float CEL compares)."""

    exact: Decimal

    def __new__(cls, value: Decimal) -> _Quantity:
        q = cast(_Quantity, super().__new__(cls, float(value)))
        q.exact = value
        return q


class _Version(celtypes.StringType):
    """A semantic version; compared by its numbers, not as a string."""

    def numbers(self) -> tuple[int, int, int]:
        m = re.match(r"^v?(\d+)\.(\d+)\.(\d+)", str(self))
        if not m:
            raise ValueError(f"{str(self)!r} is not a semantic version")
        return (int(m[1]), int(m[2]), int(m[3]))


def _ordered(a: Any) -> Any:
    if isinstance(a, _Quantity):
        return a.exact
    if isinstance(a, _Version):
        return a.numbers()
    raise TypeError(f"no comparison for {type(a).__name__}")


def _compare(a: Any, b: Any) -> celtypes.IntType:
    x, y = _ordered(a), _ordered(b)
    return celtypes.IntType((x > y) - (x < y))


def _quantity_fn(text: Any) -> _Quantity:
    return _Quantity(parse_quantity(str(text)))


def _semver_fn(text: Any) -> _Version:
    v = _Version(str(text))
    v.numbers()
    return v


_FUNCTIONS: dict[str, Callable[..., Any]] = {
    "quantity": _quantity_fn,
    "semver": _semver_fn,
    "compareTo": _compare,
    "isGreaterThan": lambda a, b: celtypes.BoolType(_compare(a, b) > 0),
    "isLessThan": lambda a, b: celtypes.BoolType(_compare(a, b) < 0),
    "asInteger": lambda a: celtypes.IntType(int(a.exact)),
    "asApproximateFloat": lambda a: celtypes.DoubleType(float(a.exact)),
    "sign": lambda a: celtypes.IntType((a.exact > 0) - (a.exact < 0)),
    "isInteger": lambda a: celtypes.BoolType(a.exact == a.exact.to_integral_value()),
    "major": lambda v: celtypes.IntType(v.numbers()[0]),
    "minor": lambda v: celtypes.IntType(v.numbers()[1]),
    "patch": lambda v: celtypes.IntType(v.numbers()[2]),
}


class _Domains(celtypes.MapType):
    """`device.attributes` and `device.capacity`: a domain the device lacks is an empty map."""

    def __getitem__(self, key: Any) -> Any:
        if key not in self:
            return celtypes.MapType({})
        return super().__getitem__(key)


def _value(v: Any, version: bool) -> Any:
    if isinstance(v, bool):
        return celtypes.BoolType(v)
    if isinstance(v, int):
        return celtypes.IntType(v)
    return _Version(v) if version else celtypes.StringType(v)


def _by_domain(items: Mapping[str, Any]) -> _Domains:
    domains: dict[str, dict[Any, Any]] = {}
    for qualified, value in items.items():
        domain, _, name = qualified.rpartition("/")
        domains.setdefault(domain, {})[celtypes.StringType(name)] = value
    return _Domains(
        {celtypes.StringType(d): celtypes.MapType(names) for d, names in domains.items()}
    )


def activation(device: Device) -> dict[str, Any]:
    """The CEL variables for one device."""
    return {
        "device": celtypes.MapType(
            {
                celtypes.StringType("driver"): celtypes.StringType(device.driver),
                celtypes.StringType("allowMultipleAllocations"): celtypes.BoolType(device.shared),
                celtypes.StringType("attributes"): _by_domain(
                    {k: _value(v, k in device.versions) for k, v in device.attributes.items()}
                ),
                celtypes.StringType("capacity"): _by_domain(
                    {k: _Quantity(c.value) for k, c in device.capacity.items()}
                ),
            }
        )
    }


class Selectors:
    """Compiled expressions, at most _CACHE_SIZE kept (the least recently used go first)."""

    def __init__(self) -> None:
        self._env = celpy.Environment()
        self._programs: OrderedDict[str, Any] = OrderedDict()

    def _program(self, expression: str) -> Any:
        program = self._programs.get(expression)
        if program is not None:
            self._programs.move_to_end(expression)
            return program
        try:
            ast = self._env.compile(expression)
        except celpy.CELParseError as exc:
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else "syntax error"
            raise SelectorError(
                f"CEL expression {expression!r} does not compile: {first}"
            ) from None
        program = self._env.program(ast, functions=_FUNCTIONS)
        self._programs[expression] = program
        if len(self._programs) > _CACHE_SIZE:
            self._programs.popitem(last=False)
        return program

    def check(self, expression: str) -> None:
        """SelectorError when the expression does not compile."""
        self._program(expression)

    def matches(self, expression: str, variables: Mapping[str, Any]) -> bool:
        """Whether the device the variables stand for is selected; SelectorError on an
        expression that fails on it or gives something other than a bool."""
        try:
            result = self._program(expression).evaluate(dict(variables))
        except celpy.CELEvalError as exc:
            raise SelectorError(_eval_message(expression, exc)) from None
        except (ValueError, TypeError, ArithmeticError) as exc:
            raise SelectorError(f"CEL expression {expression!r} failed: {exc}") from None
        if isinstance(result, celpy.CELEvalError):
            raise SelectorError(_eval_message(expression, result))
        if not isinstance(result, celtypes.BoolType):
            raise SelectorError(
                f"CEL expression {expression!r} gave {type(result).__name__}, not a bool"
            )
        return bool(result)


def _eval_message(expression: str, exc: Exception) -> str:
    text = str(exc.args[0]) if exc.args else str(exc)
    if m := _UNDECLARED.search(text):
        return f"CEL expression {expression!r}: {m[1]!r} is not supported by this simulation"
    if "no such" in text:
        detail = exc.args[2] if len(exc.args) > 2 and exc.args[2] else ""
        return f"CEL expression {expression!r}: {text}{f' {detail}' if detail else ''}"
    return f"CEL expression {expression!r} failed: {text}"
