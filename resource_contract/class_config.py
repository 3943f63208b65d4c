"""The configuration's class sections: RDT and block I/O classes in goresctrl's formats, CPU
classes, and which namespaces may ask for each class (`classAccess`)."""

from __future__ import annotations

import re
from typing import Any

from pydantic import Field, field_validator, model_validator

from resource_contract.classes import CLASS_NAME_PATTERN, reserved_name_problem
from resource_contract.config_model import CLASS_NAME, StrictModel, safe_names

# The root resctrl group's name in goresctrl's configuration.
RDT_ROOT_CLASS = "system/default"
_FREQ_LIMIT = 100_000_000  # kHz: 100 GHz, far above any CPU, so a typo is caught


def _check_class_name(name: str) -> str:
    """An RDT class name: the pattern, and none of the kernel's own names in resctrl."""
    if name != RDT_ROOT_CLASS and not CLASS_NAME.fullmatch(name):
        raise ValueError(f'class name "{name}" must match {CLASS_NAME_PATTERN}')
    reserved = reserved_name_problem("rdt", name)
    if reserved is not None:
        raise ValueError(f"class name {reserved}")
    return name


class CPUClass(StrictModel):
    """One entry of `cpuClasses`: frequencies in kHz (as cpufreq writes them), C-states by name."""

    minFreq: int | None = Field(default=None, gt=0, le=_FREQ_LIMIT)
    maxFreq: int | None = Field(default=None, gt=0, le=_FREQ_LIMIT)
    uncoreMinFreq: int | None = Field(default=None, gt=0, le=_FREQ_LIMIT)
    uncoreMaxFreq: int | None = Field(default=None, gt=0, le=_FREQ_LIMIT)
    disabledCstates: list[str] = Field(default_factory=list)

    @field_validator("disabledCstates")
    @classmethod
    def _cstate_names(cls, names: list[str]) -> list[str]:
        for name in names:
            # cpuidle's `name` files: short words such as POLL, C1, C1E, C6, C1_ACPI.
            if not _CSTATE_NAME.fullmatch(name):
                raise ValueError(f'C-state name "{name}" must match {_CSTATE_NAME.pattern}')
        return names

    @model_validator(mode="after")
    def _ordered(self) -> CPUClass:
        for low, high in (("minFreq", "maxFreq"), ("uncoreMinFreq", "uncoreMaxFreq")):
            lo, hi = getattr(self, low), getattr(self, high)
            if lo is not None and hi is not None and lo > hi:
                raise ValueError(f"{low} {lo} is above {high} {hi}")
        return self


_CSTATE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,31}$")


class RDTOptionEntry(StrictModel):
    optional: bool = False


class RDTOptions(StrictModel):
    l2: RDTOptionEntry = Field(default_factory=RDTOptionEntry)
    l3: RDTOptionEntry = Field(default_factory=RDTOptionEntry)
    mb: RDTOptionEntry = Field(default_factory=RDTOptionEntry)


# RDT and block I/O use goresctrl's formats unchanged. Pydantic checks their shape (known keys,
# lists, maps); the enforcer checks the values' syntax with its controllers' pure parsers
# (passed to parse_config as `checks`), which name the exact key path of each problem.
# Allocation values stay raw here: their meaning depends on the hardware.
CacheAllocation = Any  # "60%", "50-100%", "0xff0", "4-11", or {all: ..., "0": ...}
MBAllocation = Any  # ["50%", "1000MBps"] or {all: [...], "0": [...]}


class RDTClass(StrictModel):
    l2Allocation: CacheAllocation = None
    l3Allocation: CacheAllocation = None
    mbAllocation: MBAllocation = None
    # goresctrl's per-class Kubernetes options; refused with a pointer to classAccess.
    kubernetes: Any = None


class RDTPartition(StrictModel):
    l2Allocation: CacheAllocation = None
    l3Allocation: CacheAllocation = None
    mbAllocation: MBAllocation = None
    classes: dict[str, RDTClass | None] = Field(default_factory=dict)

    @field_validator("classes")
    @classmethod
    def _names(cls, classes: dict[str, RDTClass | None]) -> dict[str, RDTClass | None]:
        for name in classes:
            _check_class_name(name)
        return classes


class RDTConfig(StrictModel):
    options: RDTOptions = Field(default_factory=RDTOptions)
    partitions: dict[str, RDTPartition] = Field(default_factory=dict)

    @field_validator("partitions")
    @classmethod
    def _names(cls, partitions: dict[str, RDTPartition]) -> dict[str, RDTPartition]:
        return safe_names(partitions, "partition name")

    def class_names(self) -> set[str]:
        return {name for p in self.partitions.values() for name in p.classes}


# A Kubernetes quantity ("50M", "10k", 80); range-checked by check_blockio.
Quantity = str | int | float


class BlockIODevices(StrictModel):
    Devices: list[str] | None = None
    Weight: Quantity | None = None
    ThrottleReadBps: Quantity | None = None
    ThrottleWriteBps: Quantity | None = None
    ThrottleReadIOPS: Quantity | None = None
    ThrottleWriteIOPS: Quantity | None = None


class BlockIOConfig(StrictModel):
    Classes: dict[str, list[BlockIODevices] | None] = Field(default_factory=dict)

    @field_validator("Classes")
    @classmethod
    def _names(cls, classes: dict[str, Any]) -> dict[str, Any]:
        return safe_names(classes, "class name")

    def class_names(self) -> set[str]:
        return set(self.Classes)


class ClassAccessConfig(StrictModel):
    rdt: dict[str, list[str]] = Field(default_factory=dict)
    blockio: dict[str, list[str]] = Field(default_factory=dict)
    # balloons: which namespaces may ask for a balloon type by annotation (unlisted: all).
    balloon: dict[str, list[str]] = Field(default_factory=dict)
    # CPU classes asked for by annotation for exclusive CPUs (unlisted: all).
    cpu: dict[str, list[str]] = Field(default_factory=dict)
    # scheduling and memory classes (unlisted: all; a real-time class must be listed).
    scheduling: dict[str, list[str]] = Field(default_factory=dict)
    memory: dict[str, list[str]] = Field(default_factory=dict)
