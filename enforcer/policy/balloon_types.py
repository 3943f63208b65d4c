"""The balloons policy's types and balloons: the types a configuration gives, in the order they
are tried; a balloon's size under its type's limits; which type a namespace falls to; and the
messages that name the limit that refuses."""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from fnmatch import fnmatchcase

from enforcer.policy.model import PlacementError
from enforcer.topology import CPUSet
from resource_contract.config import ConfigError
from resource_contract.policy_config import (
    DEFAULT_BALLOON,
    RESERVED_BALLOON,
    BalloonType,
    PolicyConfig,
)

PRIORITY = {"high": 0, "normal": 1, "low": 2, "none": 3}
BUILTIN_DEFAULT = BalloonType(
    name=DEFAULT_BALLOON, minBalloons=1, maxBalloons=1, shareIdleCPUsInSame="system"
)


@dataclass
class Balloon:
    """One balloon: its CPUs and its containers (key -> milli-CPU requested)."""

    type: str
    instance: int
    cpus: CPUSet
    members: dict[str, int] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return f"{self.type}[{self.instance}]"

    @property
    def milli(self) -> int:
        return sum(self.members.values())


def ordered_types(config: PolicyConfig) -> dict[str, BalloonType]:
    """name -> type: `reserved` first, `default` last (built in when not configured)."""
    listed = {t.name: t for t in config.balloonTypes}
    reserved = listed.get(RESERVED_BALLOON, BalloonType(name=RESERVED_BALLOON))
    ordered = [t for t in config.balloonTypes if t.name not in (RESERVED_BALLOON,)]
    if DEFAULT_BALLOON not in listed:
        ordered.append(BUILTIN_DEFAULT)
    elif ordered[-1].name != DEFAULT_BALLOON:  # default is the last resort wherever listed
        ordered = [t for t in ordered if t.name != DEFAULT_BALLOON] + [listed[DEFAULT_BALLOON]]
    types: dict[str, BalloonType] = {RESERVED_BALLOON: reserved}
    types.update((t.name, t) for t in ordered)
    return types


def balloon_size(btype: BalloonType, milli: int, members: int) -> int:
    """CPUs a balloon of `btype` holds for `members` containers requesting `milli` in all."""
    need = math.ceil(milli / 1000)
    return max(btype.minCPUs, need, 1 if members else 0)


def matches(namespace: str, patterns: Iterable[str]) -> bool:
    return any(fnmatchcase(namespace, p) for p in patterns)


def minimum_error(
    btype: BalloonType, where: int | None, free: CPUSet, *, at_start: bool
) -> ConfigError:
    """minBalloons of `btype` (at `where` in the configured list) do not fit in `free`."""
    key = (
        f"policy.balloonTypes.{where}.minBalloons"
        if where is not None
        else f"policy.balloonTypes ({btype.name})"
    )
    return ConfigError(
        [
            f"{key}: {btype.minBalloons} balloons of type {btype.name} with "
            f"minCPUs {btype.minCPUs} do not fit: {len(free)} CPUs are left "
            f"({free or 'none'}) after the reserved CPUs"
            + ("" if at_start else " and the running containers' balloons")
            + " and the balloons of types of higher or equal allocatorPriority"
        ]
    )


def refusal(where: str, btype: BalloonType, milli: int, count: int, free: int) -> PlacementError:
    """No balloon of `btype` (`count` of them, `free` CPUs in none) can take `milli`."""
    limits = (
        f"minCPUs {btype.minCPUs}, maxCPUs {btype.maxCPUs or 'unbounded'}, "
        f"maxBalloons {btype.maxBalloons or 'unbounded'}"
    )
    alone = balloon_size(btype, milli, 1)
    if btype.maxCPUs and alone > btype.maxCPUs:
        why = f"it alone needs {alone} CPUs, above maxCPUs {btype.maxCPUs}"
    else:
        full = btype.maxBalloons and count >= btype.maxBalloons
        why = f"none of its {count} balloons can inflate to take it, and " + (
            f"maxBalloons {btype.maxBalloons} are in use"
            if full
            else f"a new balloon of {alone} CPUs does not fit in the {free} free CPUs"
        )
    return PlacementError(
        f"{where}: asked for {milli}m CPU; balloon type {btype.name} ({limits}) cannot "
        f"take it: {why} ({free} CPUs in no balloon)",
        nearest_pool=btype.name,
    )
