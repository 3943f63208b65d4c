"""The configuration file's schema, one file for both programs: strict, problems named by key path.

This validates what can be checked without the machine and without the enforcer's controllers:
types, names, the shapes of the `rdt` and `blockio` sections. The enforcer adds its controllers'
checks of the goresctrl value formats (passed in as `checks`), and checks against the hardware
(reserved CPUs outside the machine, masks wider than the cache, devices) are made by
`check-config` with `--sysfs-root` / `--resctrl-root` and by the enforcer at start.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from resource_contract.classes import (
    CLASS_NAME_PATTERN,
    ClassAccess,
    ClassKind,
    reserved_name_problem,
)
from resource_contract.preferences import PreferenceAccess
from resource_contract.quantities import parse_quantity

_CLASS_NAME = re.compile(CLASS_NAME_PATTERN)
# The root resctrl group's name in goresctrl's configuration.
RDT_ROOT_CLASS = "system/default"
_CPUSET = re.compile(r"^\s*\d+(-\d+)?(\s*,\s*\d+(-\d+)?)*\s*$")


def reserved_is_quantity(value: str | int | float) -> bool:
    """Numbers and strings with a milli suffix or a decimal point are CPU quantities; other
    strings are cpusets, so "2" means CPU 2 while 2 means two CPUs."""
    if isinstance(value, int | float):
        return True
    return bool(_QUANTITY_STRING.fullmatch(value.strip()))


_QUANTITY_STRING = re.compile(r"(\d+m)|(\d*\.\d+)|(\d+\.\d*)|(-\S+)")


class ConfigError(ValueError):
    """A refused configuration: one `key.path: reason` line per problem."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("\n".join(problems))
        self.problems = problems


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


def _check_class_name(name: str) -> str:
    """An RDT class name: the pattern, and none of the kernel's own names in resctrl."""
    if name != RDT_ROOT_CLASS and not _CLASS_NAME.fullmatch(name):
        raise ValueError(f'class name "{name}" must match {CLASS_NAME_PATTERN}')
    reserved = reserved_name_problem("rdt", name)
    if reserved is not None:
        raise ValueError(f"class name {reserved}")
    return name


class PolicyConfig(_Strict):
    name: Literal["none", "static", "topology-aware"] = "none"
    # A cpuset ("0-1") or a CPU quantity (2, "1500m"); resolved against the topology later.
    reservedCPUs: str | int | float | None = None
    availableCPUs: str | None = None
    pinMemory: bool = True
    preferIsolatedCPUs: bool = True
    preferSharedCPUs: bool = False
    reservedNamespaces: list[str] = Field(default_factory=lambda: ["kube-system"])

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
        elif not _CPUSET.fullmatch(str(value)):
            raise ValueError(
                f'"{value}" is neither a cpuset such as "0-1" nor a CPU quantity such as "1500m"'
            )
        return value

    @field_validator("availableCPUs")
    @classmethod
    def _available_syntax(cls, value: str | None) -> str | None:
        if value is not None and not _CPUSET.fullmatch(value):
            raise ValueError(f'"{value}" is not a cpuset list such as "0-63"')
        return value


class RDTOptionEntry(_Strict):
    optional: bool = False


class RDTOptions(_Strict):
    l2: RDTOptionEntry = Field(default_factory=RDTOptionEntry)
    l3: RDTOptionEntry = Field(default_factory=RDTOptionEntry)
    mb: RDTOptionEntry = Field(default_factory=RDTOptionEntry)


# RDT and block I/O use goresctrl's formats unchanged. Pydantic checks their shape (known keys,
# lists, maps); the enforcer checks the values' syntax with its controllers' pure parsers
# (passed to parse_config as `checks`), which name the exact key path of each problem.
# Allocation values stay raw here: their meaning depends on the hardware.
CacheAllocation = Any  # "60%", "50-100%", "0xff0", "4-11", or {all: ..., "0": ...}
MBAllocation = Any  # ["50%", "1000MBps"] or {all: [...], "0": [...]}


class RDTClass(_Strict):
    l2Allocation: CacheAllocation = None
    l3Allocation: CacheAllocation = None
    mbAllocation: MBAllocation = None
    # goresctrl's per-class Kubernetes options; refused with a pointer to classAccess.
    kubernetes: Any = None


class RDTPartition(_Strict):
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


def _safe_names(mapping: dict[str, Any], what: str) -> dict[str, Any]:
    """Names become folder names: only the contract's pattern is allowed."""
    for name in mapping:
        if not _CLASS_NAME.fullmatch(name):
            raise ValueError(f'{what} "{name}" must match {CLASS_NAME_PATTERN}')
    return mapping


class RDTConfig(_Strict):
    options: RDTOptions = Field(default_factory=RDTOptions)
    partitions: dict[str, RDTPartition] = Field(default_factory=dict)

    @field_validator("partitions")
    @classmethod
    def _names(cls, partitions: dict[str, RDTPartition]) -> dict[str, RDTPartition]:
        return _safe_names(partitions, "partition name")

    def class_names(self) -> set[str]:
        return {name for p in self.partitions.values() for name in p.classes}


# A Kubernetes quantity ("50M", "10k", 80); range-checked by check_blockio.
Quantity = str | int | float


class BlockIODevices(_Strict):
    Devices: list[str] | None = None
    Weight: Quantity | None = None
    ThrottleReadBps: Quantity | None = None
    ThrottleWriteBps: Quantity | None = None
    ThrottleReadIOPS: Quantity | None = None
    ThrottleWriteIOPS: Quantity | None = None


class BlockIOConfig(_Strict):
    Classes: dict[str, list[BlockIODevices] | None] = Field(default_factory=dict)

    @field_validator("Classes")
    @classmethod
    def _names(cls, classes: dict[str, Any]) -> dict[str, Any]:
        return _safe_names(classes, "class name")

    def class_names(self) -> set[str]:
        return set(self.Classes)


class ClassAccessConfig(_Strict):
    rdt: dict[str, list[str]] = Field(default_factory=dict)
    blockio: dict[str, list[str]] = Field(default_factory=dict)


class PreferenceAccessConfig(BaseModel):
    """`preferenceAccess`: namespace globs per CPU preference; absent (or null) means the
    default: `policy.reservedNamespaces` for `cpu.preserve` and `prefer-reserved-cpus`, every
    namespace for the others. An empty list allows no namespace."""

    # The keys are the annotations' own names, dots and dashes included; only those spellings
    # are accepted (a Python-style `cpu_preserve` is an unknown key, like any other).
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=False)

    cpu_preserve: list[str] | None = Field(default=None, alias="cpu.preserve")
    prefer_reserved_cpus: list[str] | None = Field(default=None, alias="prefer-reserved-cpus")
    prefer_isolated_cpus: list[str] | None = Field(default=None, alias="prefer-isolated-cpus")
    prefer_shared_cpus: list[str] | None = Field(default=None, alias="prefer-shared-cpus")

    def configured(self) -> dict[str, list[str] | None]:
        """Preference name (as in the annotations) -> the configured globs, None when absent."""
        return {
            "cpu.preserve": self.cpu_preserve,
            "prefer-reserved-cpus": self.prefer_reserved_cpus,
            "prefer-isolated-cpus": self.prefer_isolated_cpus,
            "prefer-shared-cpus": self.prefer_shared_cpus,
        }


def is_host_port(address: str) -> bool:
    """`HOST:PORT` (HOST may be empty or `[v6]`), or empty (no endpoint)."""
    _host, sep, port = address.rpartition(":")
    return not address or bool(sep and port.isdigit() and int(port) < 65536)


class MetricsConfig(_Strict):
    # Used when `--metrics-address` is not given; read at start (a restart moves it).
    address: str = "127.0.0.1:8891"

    @field_validator("address")
    @classmethod
    def _host_port(cls, address: str) -> str:
        if not is_host_port(address):
            raise ValueError(f'"{address}" is not HOST:PORT (or empty: no endpoint)')
        return address


class NodeResourceTopologyConfig(_Strict):
    """`nodeResourceTopology`: publishing a topology.node.k8s.io/v1alpha2 NodeResourceTopology
    for the node (docs/scheduling.md)."""

    enabled: bool = False
    # At most one write per this many seconds, however often allocations change.
    minIntervalSeconds: float = Field(default=5.0, ge=1, le=3600)
    # What the object tells the scheduler plugin about alignment (its filter acts only on
    # single-numa-node); None: single-numa-node under topology-aware, none otherwise.
    topologyManagerPolicy: (
        Literal["none", "best-effort", "restricted", "single-numa-node"] | None
    ) = None
    topologyManagerScope: Literal["container", "pod"] = "container"


class VerifyConfig(_Strict):
    """How often the enforcer reads every running container's cpuset back (and repairs it)."""

    periodSeconds: float = Field(default=10.0, gt=0, le=3600)


class Config(_Strict):
    policy: PolicyConfig = Field(default_factory=PolicyConfig)
    rdt: RDTConfig | None = None
    blockio: BlockIOConfig | None = None
    classAccess: ClassAccessConfig = Field(default_factory=ClassAccessConfig)
    preferenceAccess: PreferenceAccessConfig = Field(default_factory=PreferenceAccessConfig)
    metrics: MetricsConfig = Field(default_factory=MetricsConfig)
    nodeResourceTopology: NodeResourceTopologyConfig = Field(
        default_factory=NodeResourceTopologyConfig
    )
    verify: VerifyConfig = Field(default_factory=VerifyConfig)

    def configured_classes(self, kind: ClassKind) -> set[str]:
        """Class names a pod may ask for (the root group is never asked for by name)."""
        section = self.rdt if kind == "rdt" else self.blockio
        names = section.class_names() if section is not None else set()
        return names - {RDT_ROOT_CLASS}

    def class_access(self) -> ClassAccess:
        return ClassAccess(
            {
                "rdt": {k: tuple(v) for k, v in self.classAccess.rdt.items()},
                "blockio": {k: tuple(v) for k, v in self.classAccess.blockio.items()},
            }
        )

    def preference_access(self) -> PreferenceAccess:
        """Which namespaces may ask for each CPU preference, defaults filled in."""
        return PreferenceAccess.defaults(
            self.policy.reservedNamespaces, self.preferenceAccess.configured()
        )


def _key_path(loc: tuple[int | str, ...]) -> str:
    # pydantic adds the union member's type name to the location; users never wrote it.
    parts = [str(p) for p in loc if not (isinstance(p, str) and ("[" in p or p in _TYPE_TAGS))]
    return ".".join(parts) or "(top level)"


_TYPE_TAGS = {"str", "int", "float", "bool", "list", "dict", "RDTClass", "function-after"}


# A further check of a schema-valid configuration: one `key.path: reason` line per problem.
ConfigCheck = Callable[["Config"], list[str]]


def parse_config(data: Any, checks: Iterable[ConfigCheck] = ()) -> Config:
    """Validates already-loaded YAML, then runs `checks`; raises ConfigError naming each
    problem's key path."""
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError([f"(top level): must be a mapping, not {type(data).__name__}"])
    try:
        config = Config.model_validate(data)
    except ValidationError as exc:
        problems: list[str] = []
        for err in exc.errors():
            line = f"{_key_path(err['loc'])}: {err['msg'].removeprefix('Value error, ')}"
            if line not in problems:
                problems.append(line)
        raise ConfigError(problems) from None
    problems = [problem for check in checks for problem in check(config)]
    for kind in ("rdt", "blockio"):
        configured = config.configured_classes(kind)
        for name in getattr(config.classAccess, kind):
            if name not in configured:
                problems.append(
                    f"classAccess.{kind}.{name}: no {kind} class of that name is configured"
                )
    if problems:
        raise ConfigError(problems)
    return config


def load_config(path: str | Path, checks: Iterable[ConfigCheck] = ()) -> Config:
    """Reads and validates a configuration file (see `parse_config`)."""
    try:
        text = Path(path).read_text()
    except OSError as exc:
        raise ConfigError([f"{path}: cannot read: {exc.strerror}"]) from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError([f"{path}: not valid YAML: {exc}"]) from None
    return parse_config(data, checks)
