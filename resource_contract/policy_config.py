"""The configuration's `policy` section: the policy, its reserved and available CPUs, its
preferences, kubelet's CPU manager options and the balloon types."""

from __future__ import annotations

import re
from typing import Literal

from pydantic import Field, ValidationInfo, field_validator, model_validator

from resource_contract.classes import CLASS_NAME_PATTERN
from resource_contract.config_model import CLASS_NAME, StrictModel
from resource_contract.cpusets import cpuset_problem
from resource_contract.quantities import parse_quantity


def reserved_is_quantity(value: str | int | float) -> bool:
    """Numbers and strings with a milli suffix or a decimal point are CPU quantities; other
    strings are cpusets, so "2" means CPU 2 while 2 means two CPUs."""
    if isinstance(value, int | float):
        return True
    return bool(_QUANTITY_STRING.fullmatch(value.strip()))


_QUANTITY_STRING = re.compile(r"(\d+m)|(\d*\.\d+)|(\d+\.\d*)|(-\S+)", re.ASCII)


ShareLevel = Literal["system", "package", "die", "numa", "l2cache", "core"]
AllocatorPriority = Literal["high", "normal", "low", "none"]
# The peer documents `allocatorPriority` as numbers too (0: high ... 3: none).
_PRIORITY_NUMBERS: dict[int, AllocatorPriority] = {0: "high", 1: "normal", 2: "low", 3: "none"}
# The balloon types every balloons configuration has, whether it lists them or not.
RESERVED_BALLOON = "reserved"
DEFAULT_BALLOON = "default"


class BalloonType(StrictModel):
    """One entry of `policy.balloonTypes`: keys as the NRI balloons policy names them."""

    name: str
    namespaces: list[str] = Field(default_factory=list)
    minCPUs: int = Field(default=0, ge=0, le=65536)
    maxCPUs: int = Field(default=0, ge=0, le=65536)  # 0: no limit
    minBalloons: int = Field(default=0, ge=0, le=4096)
    maxBalloons: int = Field(default=0, ge=0, le=4096)  # 0: no limit
    allocatorPriority: AllocatorPriority = "normal"
    preferNewBalloons: bool = False
    preferSpreadingPods: bool = False
    preferPerNamespaceBalloon: bool = False
    shareIdleCPUsInSame: ShareLevel | None = None
    cpuClass: str | None = None
    pinMemory: bool | None = None  # None: policy.pinMemory
    schedulingClass: str | None = None  # schedulingClasses, for its containers
    memoryClass: str | None = None  # memoryClasses, for its containers

    @field_validator("name")
    @classmethod
    def _name(cls, name: str) -> str:
        if not CLASS_NAME.fullmatch(name):
            raise ValueError(f'balloon type name "{name}" must match {CLASS_NAME_PATTERN}')
        return name

    @field_validator("allocatorPriority", mode="before")
    @classmethod
    def _priority(cls, value: object) -> object:
        if isinstance(value, int) and not isinstance(value, bool) and value in _PRIORITY_NUMBERS:
            return _PRIORITY_NUMBERS[value]
        return value

    @model_validator(mode="after")
    def _bounds(self) -> BalloonType:
        if self.maxCPUs and self.minCPUs > self.maxCPUs:
            raise ValueError(f"minCPUs {self.minCPUs} is above maxCPUs {self.maxCPUs}")
        if self.maxBalloons and self.minBalloons > self.maxBalloons:
            raise ValueError(
                f"minBalloons {self.minBalloons} is above maxBalloons {self.maxBalloons}"
            )
        if self.name == RESERVED_BALLOON:
            # By value, not by presence: a saved configuration lists every key.
            fixed = [
                key
                for key in ("minCPUs", "maxCPUs", "minBalloons", "maxBalloons")
                if getattr(self, key)
            ]
            if fixed:
                raise ValueError(
                    f"the reserved balloon is policy.reservedCPUs, one balloon of fixed size: "
                    f"{', '.join(fixed)} cannot be set for it"
                )
        return self


class PolicyConfig(StrictModel):
    name: Literal["none", "static", "topology-aware", "balloons"] = "none"
    # A cpuset ("0-1") or a CPU quantity (2, "1500m"); resolved against the topology later.
    reservedCPUs: str | int | float | None = None
    availableCPUs: str | None = None
    pinMemory: bool = True
    preferIsolatedCPUs: bool = True
    preferSharedCPUs: bool = False
    reservedNamespaces: list[str] = Field(default_factory=lambda: ["kube-system"])
    # balloons: the types, in order (the first whose namespaces match takes a container).
    balloonTypes: list[BalloonType] = Field(default_factory=list)
    # kubelet's CPU manager policy options of the same names (static and topology-aware).
    fullPCPUsOnly: bool = False
    distributeCPUsAcrossNUMA: bool = False
    distributeCPUsAcrossCores: bool = False
    alignBySocket: bool = False
    strictCPUReservation: bool = False
    preferAlignCPUsByUncoreCache: bool = False
    # CPUs and memory on the NUMA node(s) of the container's devices (device plugins, DRA).
    preferCloseToDevices: bool = False

    @field_validator("balloonTypes")
    @classmethod
    def _unique_types(cls, types: list[BalloonType], info: ValidationInfo) -> list[BalloonType]:
        name = info.data.get("name")
        if types and name is not None and name != "balloons":
            raise ValueError(f"only read by the balloons policy, not by {name}")
        seen: set[str] = set()
        for balloon in types:
            if balloon.name in seen:
                raise ValueError(f'balloon type "{balloon.name}" is defined twice')
            seen.add(balloon.name)
        return types

    def balloon_type_names(self) -> list[str]:
        """Every balloon type a container may be given, the built-in ones included."""
        names = [RESERVED_BALLOON] + [b.name for b in self.balloonTypes]
        if DEFAULT_BALLOON not in names:
            names.append(DEFAULT_BALLOON)
        return list(dict.fromkeys(names))

    @field_validator("reservedCPUs", mode="before")
    @classmethod
    def _reserved_syntax(cls, value: object) -> object:
        if value is None:
            return value
        if isinstance(value, bool) or not isinstance(value, str | int | float):
            raise ValueError('must be a cpuset such as "0-1" or a CPU quantity such as 2')
        if reserved_is_quantity(value):
            try:
                quantity = parse_quantity(value)
            except ValueError:
                raise ValueError(f'"{value}" is not a CPU quantity such as "1500m"') from None
            if quantity < 0:
                raise ValueError(f'"{value}" is negative')
        else:
            _check_cpuset(str(value), 'neither a cpuset such as "0-1" nor a CPU quantity')
        return value

    @field_validator("availableCPUs")
    @classmethod
    def _available_syntax(cls, value: str | None) -> str | None:
        if value is not None:
            _check_cpuset(value, 'not a cpuset list such as "0-63"')
        return value


def _check_cpuset(value: str, empty: str) -> None:
    """ValueError saying why `value` is not a non-empty cpuset (the one parser's reason)."""
    problem = cpuset_problem(value)
    if problem is not None:
        raise ValueError(f'"{value}" is not a cpuset: {problem}')
    if not value.strip(" \t\n\r"):
        raise ValueError(f'"{value}" is {empty}')
