"""The plain data of a claim simulation, read from resource.k8s.io/v1 JSON shapes: devices (from
ResourceSlices), DeviceClasses and ResourceClaim specs. Bad input raises ClaimInputError naming
the field path; nothing else is raised.

Attribute and capacity names are kept fully qualified: a device's unqualified `numaNode` of the
driver `cpu.resource-enforcer.dev` is `cpu.resource-enforcer.dev/numaNode`, as the API says.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any, Literal

from resource_contract.quantities import parse_quantity

# resource.k8s.io/v1 limits, so a claim the API server would refuse is refused here too.
MAX_REQUESTS = 32  # DeviceRequestsMaxSize
MAX_SUBREQUESTS = 8  # FirstAvailableDeviceRequestMaxSize
MAX_CONSTRAINTS = 32  # DeviceConstraintsMaxSize
MAX_SELECTORS = 32  # DeviceSelectorsMaxSize
MAX_COUNT = 128  # AllocationResultsMaxSize
MAX_EXPRESSION = 10 * 1024  # CELSelectorExpressionMaxLength
_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")  # a DNS label

AttributeValue = int | bool | str
Mode = Literal["ExactCount", "All"]


class ClaimInputError(ValueError):
    """A claim, class or device the simulation cannot use; the message names the field."""


@dataclass(frozen=True)
class RequestPolicy:
    """How a shared device's capacity is handed out: a default, and valid values or a range."""

    default: Decimal | None = None
    valid_values: tuple[Decimal, ...] = ()
    minimum: Decimal | None = None
    maximum: Decimal | None = None
    step: Decimal | None = None


@dataclass(frozen=True)
class Capacity:
    value: Decimal
    policy: RequestPolicy | None = None


@dataclass(frozen=True)
class Device:
    """One device of a ResourceSlice; `key` is (driver, pool, name)."""

    driver: str
    pool: str
    name: str
    attributes: Mapping[str, AttributeValue]  # qualified name -> value
    capacity: Mapping[str, Capacity]  # qualified name -> capacity
    shared: bool = False  # allowMultipleAllocations
    versions: frozenset[str] = frozenset()  # the attributes typed `version`
    # The capacity names exactly as the slice publishes them: a request names one of these
    # (the scheduler does not qualify a request's capacity name with the driver).
    capacity_names: frozenset[str] = frozenset()

    @property
    def key(self) -> tuple[str, str, str]:
        return (self.driver, self.pool, self.name)


@dataclass(frozen=True)
class DeviceClass:
    name: str
    selectors: tuple[str, ...]


@dataclass(frozen=True)
class Choice:
    """What one request (or one of its firstAvailable subrequests) asks for."""

    name: str  # `req`, or `req/sub` for a subrequest
    device_class: str
    selectors: tuple[str, ...] = ()
    mode: Mode = "ExactCount"
    count: int = 1
    capacity: Mapping[str, Decimal] = field(default_factory=dict)  # name as written -> amount


@dataclass(frozen=True)
class Request:
    name: str
    choices: tuple[Choice, ...]  # one for `exactly`; the subrequests in order for firstAvailable


@dataclass(frozen=True)
class Constraint:
    requests: tuple[str, ...]  # empty: every request of the claim
    match_attribute: str


@dataclass(frozen=True)
class ClaimSpec:
    requests: tuple[Request, ...]
    constraints: tuple[Constraint, ...] = ()


def qualified(driver: str, name: str) -> str:
    """`numaNode` of driver D is `D/numaNode`; a name with a domain stays as it is."""
    return name if "/" in name else f"{driver}/{name}"


def _map(value: Any, where: str) -> Mapping[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise ClaimInputError(f"{where}: expected an object, got {type(value).__name__}")
    return value


def _list(value: Any, where: str, limit: int) -> list[Any]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise ClaimInputError(f"{where}: expected a list, got {type(value).__name__}")
    if len(value) > limit:
        raise ClaimInputError(f"{where}: {len(value)} entries, at most {limit} allowed")
    return value


def _string(value: Any, where: str) -> str:
    if not isinstance(value, str) or not value:
        raise ClaimInputError(f"{where}: expected a non-empty string, got {value!r}")
    return value


def _label(value: Any, where: str) -> str:
    name = _string(value, where)
    if not _NAME.match(name):
        raise ClaimInputError(f"{where}: {name!r} is not a DNS label (a-z, 0-9, '-', 63 at most)")
    return name


def _quantity(value: Any, where: str) -> Decimal:
    try:
        return parse_quantity(value)
    except ValueError as exc:
        raise ClaimInputError(f"{where}: {exc}") from None


def _attribute(value: Any, where: str) -> AttributeValue:
    typed = _map(value, where)
    if len(typed) != 1:
        raise ClaimInputError(f"{where}: expected exactly one of int, bool, string, version")
    ((kind, v),) = typed.items()
    ok = {
        "int": type(v) is int,
        "bool": type(v) is bool,
        "string": isinstance(v, str),
        "version": isinstance(v, str),
    }
    if kind not in ok:
        raise ClaimInputError(f"{where}: unknown attribute type {kind!r}")
    if not ok[kind]:
        raise ClaimInputError(f"{where}.{kind}: wrong type {type(v).__name__}")
    return v  # type: ignore[no-any-return]


def _request_policy(value: Any, where: str) -> RequestPolicy | None:
    if value is None:
        return None
    raw = _map(value, where)
    valid = _list(raw.get("validValues"), f"{where}.validValues", 128)
    rng = _map(raw.get("validRange"), f"{where}.validRange")

    def q(v: Any, w: str) -> Decimal | None:
        return None if v is None else _quantity(v, w)

    return RequestPolicy(
        default=q(raw.get("default"), f"{where}.default"),
        valid_values=tuple(
            sorted(_quantity(v, f"{where}.validValues[{i}]") for i, v in enumerate(valid))
        ),
        minimum=q(rng.get("min"), f"{where}.validRange.min"),
        maximum=q(rng.get("max"), f"{where}.validRange.max"),
        step=q(rng.get("step"), f"{where}.validRange.step"),
    )


def devices_of_slice(spec: Any, where: str) -> list[Device]:
    """The devices of one ResourceSlice's spec, names qualified by its driver."""
    raw = _map(spec, where)
    driver = _string(raw.get("driver"), f"{where}.driver")
    pool = _string(_map(raw.get("pool"), f"{where}.pool").get("name"), f"{where}.pool.name")
    devices = []
    for i, dev in enumerate(_list(raw.get("devices"), f"{where}.devices", 128)):
        at = f"{where}.devices[{i}]"
        d = _map(dev, at)
        attrs = _map(d.get("attributes"), f"{at}.attributes")
        caps = _map(d.get("capacity"), f"{at}.capacity")
        capacity = {}
        versions = frozenset(
            qualified(driver, k)
            for k, v in attrs.items()
            if isinstance(v, Mapping) and "version" in v
        )
        for name, cap in caps.items():
            c = _map(cap, f"{at}.capacity.{name}")
            capacity[qualified(driver, name)] = Capacity(
                _quantity(c.get("value"), f"{at}.capacity.{name}.value"),
                _request_policy(c.get("requestPolicy"), f"{at}.capacity.{name}.requestPolicy"),
            )
        devices.append(
            Device(
                driver=driver,
                pool=pool,
                name=_string(d.get("name"), f"{at}.name"),
                attributes={
                    qualified(driver, k): _attribute(v, f"{at}.attributes.{k}")
                    for k, v in attrs.items()
                },
                capacity=capacity,
                shared=d.get("allowMultipleAllocations") is True,
                versions=versions,
                capacity_names=frozenset(caps),
            )
        )
    return devices


def _selectors(value: Any, where: str) -> tuple[str, ...]:
    found = []
    for i, sel in enumerate(_list(value, where, MAX_SELECTORS)):
        cel = _map(_map(sel, f"{where}[{i}]").get("cel"), f"{where}[{i}].cel")
        expr = _string(cel.get("expression"), f"{where}[{i}].cel.expression")
        if len(expr) > MAX_EXPRESSION:
            raise ClaimInputError(f"{where}[{i}].cel.expression: longer than {MAX_EXPRESSION}")
        found.append(expr)
    return tuple(found)


def device_class(obj: Any, where: str) -> DeviceClass:
    """A DeviceClass object (metadata.name, spec.selectors)."""
    raw = _map(obj, where)
    name = _string(
        _map(raw.get("metadata"), f"{where}.metadata").get("name"), f"{where}.metadata.name"
    )
    spec = _map(raw.get("spec"), f"{where}.spec")
    return DeviceClass(name, _selectors(spec.get("selectors"), f"{where}.spec.selectors"))


def _choice(raw: Mapping[str, Any], name: str, where: str) -> Choice:
    mode = raw.get("allocationMode", "ExactCount")
    if mode not in ("ExactCount", "All"):
        raise ClaimInputError(f"{where}.allocationMode: expected ExactCount or All, got {mode!r}")
    count = raw.get("count", 1 if mode == "ExactCount" else None)
    if mode == "All" and count is not None:
        raise ClaimInputError(f"{where}.count: must not be set with allocationMode All")
    if mode == "ExactCount" and (type(count) is not int or not 1 <= count <= MAX_COUNT):
        raise ClaimInputError(
            f"{where}.count: expected a whole number 1-{MAX_COUNT}, got {count!r}"
        )
    if raw.get("adminAccess"):
        raise ClaimInputError(f"{where}.adminAccess: not simulated (it allocates in-use devices)")
    cap = _map(
        _map(raw.get("capacity"), f"{where}.capacity").get("requests"), f"{where}.capacity.requests"
    )
    return Choice(
        name=name,
        device_class=_string(raw.get("deviceClassName"), f"{where}.deviceClassName"),
        selectors=_selectors(raw.get("selectors"), f"{where}.selectors"),
        mode=mode,
        count=count if mode == "ExactCount" else 0,
        capacity={k: _quantity(v, f"{where}.capacity.requests.{k}") for k, v in cap.items()},
    )


def claim_spec(spec: Any, where: str) -> ClaimSpec:
    """A ResourceClaim's spec (or a template's spec.spec); `where` is that spec's path."""
    devices = _map(_map(spec, where).get("devices"), f"{where}.devices")
    requests: list[Request] = []
    names: set[str] = set()
    for i, raw in enumerate(
        _list(devices.get("requests"), f"{where}.devices.requests", MAX_REQUESTS)
    ):
        at = f"{where}.devices.requests[{i}]"
        r = _map(raw, at)
        name = _label(r.get("name"), f"{at}.name")
        if name in names:
            raise ClaimInputError(f"{at}.name: {name!r} is given twice")
        names.add(name)
        exactly, first = r.get("exactly"), r.get("firstAvailable")
        if (exactly is None) == (first is None):
            raise ClaimInputError(f"{at}: exactly one of exactly and firstAvailable must be set")
        choices: tuple[Choice, ...]
        if exactly is not None:
            choices = (_choice(_map(exactly, f"{at}.exactly"), name, f"{at}.exactly"),)
        else:
            subs = []
            for j, sub in enumerate(_list(first, f"{at}.firstAvailable", MAX_SUBREQUESTS)):
                sat = f"{at}.firstAvailable[{j}]"
                s = _map(sub, sat)
                subs.append(_choice(s, f"{name}/{_label(s.get('name'), f'{sat}.name')}", sat))
            if not subs:
                raise ClaimInputError(f"{at}.firstAvailable: empty")
            choices = tuple(subs)
        requests.append(Request(name, choices))
    if not requests:
        raise ClaimInputError(f"{where}.devices.requests: a claim needs at least one request")
    known = names | {c.name for r in requests for c in r.choices}
    constraints = []
    for i, raw in enumerate(
        _list(devices.get("constraints"), f"{where}.devices.constraints", MAX_CONSTRAINTS)
    ):
        at = f"{where}.devices.constraints[{i}]"
        c = _map(raw, at)
        if c.get("distinctAttribute") is not None:
            raise ClaimInputError(f"{at}.distinctAttribute: not simulated; use matchAttribute")
        match = _string(c.get("matchAttribute"), f"{at}.matchAttribute")
        if "/" not in match:
            raise ClaimInputError(f"{at}.matchAttribute: {match!r} needs a domain (DOMAIN/NAME)")
        reqs = tuple(
            _string(n, f"{at}.requests[{j}]")
            for j, n in enumerate(_list(c.get("requests"), f"{at}.requests", MAX_REQUESTS))
        )
        for j, n in enumerate(reqs):
            if n not in known:
                raise ClaimInputError(f"{at}.requests[{j}]: no request named {n!r}")
        constraints.append(Constraint(reqs, match))
    return ClaimSpec(tuple(requests), tuple(constraints))
