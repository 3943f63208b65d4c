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
from typing import Any, Literal

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from resource_contract.balloons import BalloonAccess
from resource_contract.bounded import BoundError, Limits, load_yaml
from resource_contract.classes import (
    CLASS_NAME_PATTERN,
    ClassAccess,
    ClassKind,
    reserved_name_problem,
)
from resource_contract.cpu_classes import CpuClassAccess
from resource_contract.cpu_options import kubelet_option_problems
from resource_contract.cpusets import cpuset_problem
from resource_contract.dra_config import DRAConfig
from resource_contract.preferences import PreferenceAccess
from resource_contract.quantities import parse_quantity
from resource_contract.task_classes import (
    IrqIsolationConfig,
    MemoryClass,
    SchedulingClass,
    TaskClassAccess,
    TaskClassKind,
    TaskClassSettings,
    task_class_problems,
)

_CLASS_NAME = re.compile(CLASS_NAME_PATTERN)
# The root resctrl group's name in goresctrl's configuration.
RDT_ROOT_CLASS = "system/default"


def reserved_is_quantity(value: str | int | float) -> bool:
    """Numbers and strings with a milli suffix or a decimal point are CPU quantities; other
    strings are cpusets, so "2" means CPU 2 while 2 means two CPUs."""
    if isinstance(value, int | float):
        return True
    return bool(_QUANTITY_STRING.fullmatch(value.strip()))


_QUANTITY_STRING = re.compile(r"(\d+m)|(\d*\.\d+)|(\d+\.\d*)|(-\S+)", re.ASCII)


class ConfigError(ValueError):
    """A refused configuration: one `key.path: reason` line per problem."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("\n".join(problems))
        self.problems = problems


class _Strict(BaseModel):
    # strict: a boolean is not a number (`minCPUs: true` is no 1), a string no number either
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True, strict=True)


def _check_class_name(name: str) -> str:
    """An RDT class name: the pattern, and none of the kernel's own names in resctrl."""
    if name != RDT_ROOT_CLASS and not _CLASS_NAME.fullmatch(name):
        raise ValueError(f'class name "{name}" must match {CLASS_NAME_PATTERN}')
    reserved = reserved_name_problem("rdt", name)
    if reserved is not None:
        raise ValueError(f"class name {reserved}")
    return name


ShareLevel = Literal["system", "package", "die", "numa", "l2cache", "core"]
AllocatorPriority = Literal["high", "normal", "low", "none"]
# The peer documents `allocatorPriority` as numbers too (0: high ... 3: none).
_PRIORITY_NUMBERS: dict[int, AllocatorPriority] = {0: "high", 1: "normal", 2: "low", 3: "none"}
# The balloon types every balloons configuration has, whether it lists them or not.
RESERVED_BALLOON = "reserved"
DEFAULT_BALLOON = "default"
_FREQ_LIMIT = 100_000_000  # kHz: 100 GHz, far above any CPU, so a typo is caught


class BalloonType(_Strict):
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
        if not _CLASS_NAME.fullmatch(name):
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


class CPUClass(_Strict):
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


class PolicyConfig(_Strict):
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
    # balloons: which namespaces may ask for a balloon type by annotation (unlisted: all).
    balloon: dict[str, list[str]] = Field(default_factory=dict)
    # CPU classes asked for by annotation for exclusive CPUs (unlisted: all).
    cpu: dict[str, list[str]] = Field(default_factory=dict)
    # scheduling and memory classes (unlisted: all; a real-time class must be listed).
    scheduling: dict[str, list[str]] = Field(default_factory=dict)
    memory: dict[str, list[str]] = Field(default_factory=dict)


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
    cpuClasses: dict[str, CPUClass] = Field(default_factory=dict)
    metrics: MetricsConfig = Field(default_factory=MetricsConfig)
    nodeResourceTopology: NodeResourceTopologyConfig = Field(
        default_factory=NodeResourceTopologyConfig
    )
    verify: VerifyConfig = Field(default_factory=VerifyConfig)
    schedulingClasses: dict[str, SchedulingClass] = Field(default_factory=dict)
    memoryClasses: dict[str, MemoryClass] = Field(default_factory=dict)
    irqIsolation: IrqIsolationConfig = Field(default_factory=IrqIsolationConfig)

    @field_validator("schedulingClasses", "memoryClasses")
    @classmethod
    def _task_class_names(cls, classes: dict[str, Any]) -> dict[str, Any]:
        return _safe_names(classes, "class name")

    def task_classes(self) -> TaskClassSettings:
        """The scheduling and memory classes, and which namespaces may use each."""
        access = self.classAccess
        rules: dict[TaskClassKind, dict[str, tuple[str, ...]]] = {
            "scheduling": {k: tuple(v) for k, v in access.scheduling.items()},
            "memory": {k: tuple(v) for k, v in access.memory.items()},
        }
        return TaskClassSettings(
            set(self.schedulingClasses), set(self.memoryClasses), TaskClassAccess(rules)
        )

    dra: DRAConfig = Field(default_factory=DRAConfig)

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

    @field_validator("cpuClasses")
    @classmethod
    def _cpu_class_names(cls, classes: dict[str, CPUClass]) -> dict[str, CPUClass]:
        return _safe_names(classes, "CPU class name")

    def cpu_class_access(self) -> CpuClassAccess:
        """Which namespaces may ask for each CPU class by annotation."""
        return CpuClassAccess({k: tuple(v) for k, v in self.classAccess.cpu.items()})

    def balloon_access(self) -> BalloonAccess:
        """Which namespaces may ask for each balloon type by annotation. The reserved type
        follows `prefer-reserved-cpus` (it is the same request), unless listed here."""
        rules = {name: tuple(globs) for name, globs in self.classAccess.balloon.items()}
        reserved = self.preference_access().patterns("prefer-reserved-cpus")
        if RESERVED_BALLOON not in rules and reserved is not None:
            rules[RESERVED_BALLOON] = reserved
        return BalloonAccess(rules)

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


_NOT_BOOL_TYPES = ("int_type", "float_type", "string_type")
_NOT_BOOL = "the number or string this key takes"


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
            message = err["msg"].removeprefix("Value error, ")
            if isinstance(err.get("input"), bool) and err["type"] in _NOT_BOOL_TYPES:
                # YAML's true/false where a number (or a string) belongs: never read as 1 or 0
                message = f"{str(err['input']).lower()} is a boolean, not {_NOT_BOOL}"
            line = f"{_key_path(err['loc'])}: {message}"
            if line not in problems:
                problems.append(line)
        raise ConfigError(problems) from None
    problems = [problem for check in checks for problem in check(config)]
    problems += _balloon_problems(config)
    problems += kubelet_option_problems(config.policy, config.nodeResourceTopology)
    problems += task_class_problems(
        config.schedulingClasses,
        config.memoryClasses,
        {"scheduling": config.classAccess.scheduling, "memory": config.classAccess.memory},
        [(i, b.schedulingClass, b.memoryClass) for i, b in enumerate(config.policy.balloonTypes)],
    )
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


def _balloon_problems(config: Config) -> list[str]:
    """What the schema cannot see alone: CPU classes and access rules naming what exists."""
    problems = []
    policy = config.policy
    for i, balloon in enumerate(policy.balloonTypes):
        if balloon.cpuClass is not None and balloon.cpuClass not in config.cpuClasses:
            problems.append(
                f'policy.balloonTypes.{i}.cpuClass: CPU class "{balloon.cpuClass}" is not '
                f"configured (cpuClasses: {', '.join(sorted(config.cpuClasses)) or 'none'})"
            )
    if policy.name == "balloons" and policy.reservedCPUs is None:
        problems.append(
            "policy.reservedCPUs: the balloons policy needs reserved CPUs (the reserved "
            "balloon, where kube-system runs)"
        )
    for name in config.classAccess.cpu:
        if name not in config.cpuClasses:
            problems.append(
                f"classAccess.cpu.{name}: no CPU class of that name is configured (cpuClasses: "
                f"{', '.join(sorted(config.cpuClasses)) or 'none'})"
            )
    if config.classAccess.balloon:
        known = policy.balloon_type_names() if policy.name == "balloons" else []
        for name in config.classAccess.balloon:
            if name not in known:
                problems.append(
                    f"classAccess.balloon.{name}: no balloon type of that name is configured"
                    f" (balloon types: {', '.join(known) or 'none: the policy is not balloons'})"
                )
    return problems


# A ConfigMap holds at most 1 MiB; the schema nests 8 levels (rdt.partitions.P.classes.C.
# l3Allocation.ID.unified): 32 leaves room for a wrong shape to reach the schema, whose error
# names the key.
CONFIG_LIMITS = Limits(max_bytes=1 << 20, max_depth=32)


def config_data(text: str, source: str) -> Any:
    """A configuration's YAML, within CONFIG_LIMITS; ConfigError naming `source` and the key path
    where it nests too deep."""
    try:
        return load_yaml(text, CONFIG_LIMITS)
    except BoundError as exc:
        raise ConfigError([f"{source}: {exc}"]) from None
    except yaml.YAMLError as exc:
        raise ConfigError([f"{source}: not valid YAML: {exc}"]) from None
