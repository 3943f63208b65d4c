"""The configuration file's schema, one for both programs: its top level, the checks across
sections, and reading it; strict, problems named by key path. The sections live beside it:
`policy_config` (the policy) and `class_config` (RDT, block I/O and CPU classes, classAccess).

This validates what can be checked without the machine and without the enforcer's controllers:
types, names, the shapes of the `rdt` and `blockio` sections. The enforcer adds its controllers'
checks of the goresctrl value formats (passed in as `checks`), and checks against the hardware
(reserved CPUs outside the machine, masks wider than the cache, devices) are made by
`check-config` with `--sysfs-root` / `--resctrl-root` and by the enforcer at start.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, Literal

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
)

from resource_contract.balloons import BalloonAccess
from resource_contract.bounded import BoundError, Limits, load_yaml
from resource_contract.class_config import (
    RDT_ROOT_CLASS,
    BlockIOConfig,
    ClassAccessConfig,
    CPUClass,
    RDTConfig,
)
from resource_contract.classes import (
    ClassAccess,
    ClassKind,
)
from resource_contract.config_model import StrictModel, safe_names
from resource_contract.cpu_classes import CpuClassAccess
from resource_contract.cpu_options import kubelet_option_problems
from resource_contract.dra_config import DRAConfig
from resource_contract.policy_config import RESERVED_BALLOON, PolicyConfig
from resource_contract.preferences import PreferenceAccess
from resource_contract.task_classes import (
    IrqIsolationConfig,
    MemoryClass,
    SchedulingClass,
    TaskClassAccess,
    TaskClassKind,
    TaskClassSettings,
    task_class_problems,
)


class ConfigError(ValueError):
    """A refused configuration: one `key.path: reason` line per problem."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("\n".join(problems))
        self.problems = problems


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


class MetricsConfig(StrictModel):
    # Used when `--metrics-address` is not given; read at start (a restart moves it).
    address: str = "127.0.0.1:8891"

    @field_validator("address")
    @classmethod
    def _host_port(cls, address: str) -> str:
        if not is_host_port(address):
            raise ValueError(f'"{address}" is not HOST:PORT (or empty: no endpoint)')
        return address


class NodeResourceTopologyConfig(StrictModel):
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


class VerifyConfig(StrictModel):
    """How often the enforcer reads every running container's cpuset back (and repairs it)."""

    periodSeconds: float = Field(default=10.0, gt=0, le=3600)


class Config(StrictModel):
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
        return safe_names(classes, "class name")

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
        return safe_names(classes, "CPU class name")

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
