"""The allocation of ResourceClaims over devices, as the scheduler's structured allocator does
it: requests in order, devices in slice order, `firstAvailable` subrequests in order, backtracking
over `matchAttribute` constraints, consumable capacity on devices that allow several allocations.

Claims are allocated one after the other on one node, each seeing what the earlier ones took.
A claim that cannot be allocated raises Unsatisfiable naming the request (or the constraint)
and why; a selector that fails on a device aborts the claim, as the scheduler's does.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal

from enforcer.claims.cel import SelectorError, Selectors, activation
from enforcer.claims.model import (
    AttributeValue,
    Capacity,
    Choice,
    ClaimInputError,
    ClaimSpec,
    Constraint,
    Device,
    DeviceClass,
    qualified,
)

# Device tries for one claim before the search gives up: a few claims of a few devices over
# a few hundred devices take thousands; a pathological claim stops here instead of running on.
MAX_STEPS = 200_000

Key = tuple[str, str, str]


class Unsatisfiable(ValueError):
    """The claim cannot be allocated on this node; the message names the request and why."""


@dataclass(frozen=True)
class Allocated:
    request: str  # `req`, or `req/sub` for the subrequest that was chosen
    device: Device
    consumed: Mapping[str, Decimal]  # a shared device's capacity this result holds


def _amount(capacity: Capacity, asked: Decimal | None) -> Decimal | None:
    """What asking `asked` of a shared device's capacity really takes (None: not allowed)."""
    policy = capacity.policy
    if policy is None:
        return capacity.value if asked is None else asked
    value = policy.default if asked is None else asked
    if value is None:
        value = capacity.value
    if policy.valid_values:
        return next((v for v in policy.valid_values if v >= value), None)
    if policy.minimum is not None:
        value = max(value, policy.minimum)
        if policy.step:
            steps = math.ceil((value - policy.minimum) / policy.step)
            value = policy.minimum + steps * policy.step
    if policy.maximum is not None and value > policy.maximum:
        return None
    return value


def demand(choice: Choice, device: Device) -> dict[str, Decimal] | None:
    """The capacity one result of `choice` takes of `device`; None when it cannot fit at all."""
    if any(k not in device.capacity_names for k in choice.capacity):
        return None  # as the scheduler: a name the device does not publish, exactly
    asked = {qualified(device.driver, k): v for k, v in choice.capacity.items()}
    if not device.shared:
        fits = all(device.capacity[n].value >= v for n, v in asked.items())
        return {} if fits else None
    taken: dict[str, Decimal] = {}
    for name, cap in device.capacity.items():
        amount = _amount(cap, asked.get(name))
        if amount is None or amount > cap.value:
            return None
        taken[name] = amount
    return taken


class Allocator:
    """The devices of one node and what the claims allocated so far hold of them."""

    def __init__(
        self,
        devices: Sequence[Device],
        classes: Mapping[str, DeviceClass],
        selectors: Selectors | None = None,
    ) -> None:
        self.devices = list(devices)
        self.classes = dict(classes)
        self.selectors = selectors or Selectors()
        self._held: set[Key] = set()  # devices allocated whole
        self._consumed: dict[Key, dict[str, Decimal]] = {}  # shared devices' capacity in use

    # --- what a choice may use -------------------------------------------------------------

    def _selected(self, choice: Choice) -> list[Device]:
        """The devices of the choice's class that its selectors select, in slice order."""
        cls = self.classes.get(choice.device_class)
        if cls is None:
            raise ClaimInputError(
                f"request {choice.name!r}: deviceClassName: no DeviceClass named "
                f"{choice.device_class!r} (known: {', '.join(sorted(self.classes)) or 'none'})"
            )
        found = []
        for device in self.devices:
            variables = activation(device)
            try:
                if all(self.selectors.matches(e, variables) for e in cls.selectors) and all(
                    self.selectors.matches(e, variables) for e in choice.selectors
                ):
                    found.append(device)
            except SelectorError as exc:
                raise Unsatisfiable(
                    f"request {choice.name!r}: device {device.driver}/{device.pool}/"
                    f"{device.name}: {exc}"
                ) from None
        return found

    def _free(
        self, device: Device, need: Mapping[str, Decimal], extra: Mapping[Key, dict[str, Decimal]]
    ) -> bool:
        if device.key in self._held:
            return False
        if not device.shared:
            return device.key not in self._consumed
        for name, amount in need.items():
            used = self._consumed.get(device.key, {}).get(name, Decimal(0))
            used += extra.get(device.key, {}).get(name, Decimal(0))
            if used + amount > device.capacity[name].value:
                return False
        return True

    # --- the search ------------------------------------------------------------------------

    def allocate(self, claim: ClaimSpec) -> list[Allocated]:
        """Allocate the claim and hold its devices; Unsatisfiable (nothing held) when it cannot
        be. ClaimInputError when a request names an unknown DeviceClass."""
        candidates: dict[str, list[tuple[Device, dict[str, Decimal]]]] = {}
        for request in claim.requests:
            for choice in request.choices:
                fitting = []
                for device in self._selected(choice):
                    need = demand(choice, device)
                    if need is not None:
                        fitting.append((device, need))
                candidates[choice.name] = fitting
        search = _Search(self, claim, candidates)
        found = search.run()
        if found is None:
            raise Unsatisfiable(search.why())
        for a in found:
            if a.device.shared:
                used = self._consumed.setdefault(a.device.key, {})
                for name, amount in a.consumed.items():
                    used[name] = used.get(name, Decimal(0)) + amount
            else:
                self._held.add(a.device.key)
        return found

    def is_free(self, device: Device) -> bool:
        return device.key not in self._held and (device.shared or device.key not in self._consumed)


def _applies(constraint: Constraint, choice: Choice) -> bool:
    if not constraint.requests:
        return True
    base = choice.name.split("/", 1)[0]
    return choice.name in constraint.requests or base in constraint.requests


class _Search:
    def __init__(
        self,
        allocator: Allocator,
        claim: ClaimSpec,
        candidates: dict[str, list[tuple[Device, dict[str, Decimal]]]],
    ) -> None:
        self.a = allocator
        self.claim = claim
        self.candidates = candidates
        self.steps = 0
        self.deepest = -1  # the furthest request the search got stuck on
        self.chosen: list[Allocated] = []
        self.bound: dict[int, AttributeValue] = {}  # constraint index -> the value devices share
        self.extra: dict[Key, dict[str, Decimal]] = {}  # shared capacity this claim takes
        self.taken: set[Key] = set()

    def run(self) -> list[Allocated] | None:
        for _ in self._requests(0):
            return list(self.chosen)
        return None

    def _requests(self, index: int) -> Iterator[None]:
        if index == len(self.claim.requests):
            yield
            return
        self.deepest = max(self.deepest, index)
        for choice in self.claim.requests[index].choices:
            if choice.mode == "All":
                yield from self._all(choice, index)
            else:
                yield from self._pick(choice, index, 0, choice.count)

    def _all(self, choice: Choice, index: int) -> Iterator[None]:
        devices = self.candidates[choice.name]
        if not devices or not all(self._usable(d, need) for d, need in devices):
            return
        marks = []
        for device, need in devices:
            mark = self._take(choice, device, need)
            if mark is None:
                break
            marks.append(mark)
        else:
            yield from self._requests(index + 1)
        for mark in reversed(marks):
            self._untake(mark)

    def _pick(self, choice: Choice, index: int, start: int, left: int) -> Iterator[None]:
        if left == 0:
            yield from self._requests(index + 1)
            return
        devices = self.candidates[choice.name]
        for i in range(start, len(devices) - left + 1):
            self.steps += 1
            if self.steps > MAX_STEPS:
                raise Unsatisfiable(
                    f"request {choice.name!r}: gave up after {MAX_STEPS} device tries "
                    "(too many ways to combine the candidates; narrow the selectors)"
                )
            device, need = devices[i]
            if not self._usable(device, need):
                continue
            mark = self._take(choice, device, need)
            if mark is None:
                continue
            yield from self._pick(choice, index, i + 1, left - 1)
            self._untake(mark)

    def _usable(self, device: Device, need: Mapping[str, Decimal]) -> bool:
        if device.key in self.taken and not device.shared:
            return False
        return self.a._free(device, need, self.extra)

    def _take(
        self, choice: Choice, device: Device, need: dict[str, Decimal]
    ) -> tuple[list[int], Allocated] | None:
        newly_bound = []
        for i, constraint in enumerate(self.claim.constraints):
            if not _applies(constraint, choice):
                continue
            value = device.attributes.get(constraint.match_attribute)
            if value is None:
                break
            if i in self.bound:
                if self.bound[i] != value or type(self.bound[i]) is not type(value):
                    break
            else:
                self.bound[i] = value
                newly_bound.append(i)
        else:
            allocated = Allocated(choice.name, device, need if device.shared else {})
            self.chosen.append(allocated)
            self.taken.add(device.key)
            if device.shared:
                extra = self.extra.setdefault(device.key, {})
                for name, amount in need.items():
                    extra[name] = extra.get(name, Decimal(0)) + amount
            return newly_bound, allocated
        for i in newly_bound:
            del self.bound[i]
        return None

    def _untake(self, mark: tuple[list[int], Allocated]) -> None:
        newly_bound, allocated = mark
        for i in newly_bound:
            del self.bound[i]
        self.chosen.pop()
        device = allocated.device
        if not any(a.device.key == device.key for a in self.chosen):
            self.taken.discard(device.key)
        if device.shared:
            extra = self.extra[device.key]
            for name, amount in allocated.consumed.items():
                extra[name] -= amount

    def why(self) -> str:
        """The first request that cannot be met even on its own, else the constraints."""
        for request in self.claim.requests:
            reasons = []
            for choice in request.choices:
                reason = self._alone(choice)
                if reason is None:
                    break
                reasons.append(reason)
            else:
                return "; ".join(reasons)
        names = ", ".join(
            f"matchAttribute {c.match_attribute} over "
            + (", ".join(c.requests) if c.requests else "all requests")
            for c in self.claim.constraints
        )
        stuck = self.claim.requests[max(self.deepest, 0)].name
        return (
            f"request {stuck!r}: every request can be met on its own, but no choice of devices "
            f"meets the constraints ({names or 'none'}) together"
        )

    def _alone(self, choice: Choice) -> str | None:
        fitting = self.candidates[choice.name]
        free = [d for d, need in fitting if self.a._free(d, need, {})]
        if choice.mode == "All":
            if fitting and len(free) == len(fitting):
                return None
            return (
                f"request {choice.name!r} (allocationMode All, class {choice.device_class}): "
                f"{len(fitting)} devices match, "
                f"{len(fitting) - len(free)} of them already allocated"
            )
        if len(free) >= choice.count:
            return None
        what = f"{choice.count} device{'s' if choice.count != 1 else ''}"
        cap = ""
        if choice.capacity:
            cap = " with capacity " + ", ".join(f"{k}={v}" for k, v in choice.capacity.items())
        return (
            f"request {choice.name!r} asks for {what} of class {choice.device_class}{cap}: "
            f"{len(fitting)} match its selectors, {len(free)} of them free"
        )
