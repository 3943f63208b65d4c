"""Scheduling and memory classes: their configuration schema, and which annotation picks one.

`schedulingClasses` (SCHED policy, priority, nice, I/O class and level, CPU burst) and
`memoryClasses` (cgroup v2 memory protection and throttling) are named classes a container gets
through `schedulingclass.resource-enforcer.dev/container.C`, then `.../pod` (the same with
`memoryclass.`), or through its balloon type's `schedulingClass` / `memoryClass`. Who may use
a class is `classAccess.scheduling` / `classAccess.memory`; a real-time class (fifo, rr) must
be listed there, so that no namespace gets real-time priority because nobody thought of it.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from resource_contract.classes import CLASS_NAME_PATTERN, ClassRequestError, KindAccess, listing
from resource_contract.keys import DOMAIN
from resource_contract.quantities import parse_quantity

TaskClassKind = Literal["scheduling", "memory"]
TASK_CLASS_KINDS: tuple[TaskClassKind, ...] = ("scheduling", "memory")
_PREFIX: dict[TaskClassKind, str] = {
    "scheduling": f"schedulingclass.{DOMAIN}",
    "memory": f"memoryclass.{DOMAIN}",
}
_SECTION: dict[TaskClassKind, str] = {"scheduling": "schedulingClasses", "memory": "memoryClasses"}
_NAME = re.compile(CLASS_NAME_PATTERN)
_SHOWN = 80  # characters of a bad value quoted in a message

SchedPolicy = Literal["other", "batch", "idle", "fifo", "rr"]
IOClass = Literal["rt", "be", "idle"]
REAL_TIME: frozenset[str] = frozenset({"fifo", "rr"})
_RATIO = re.compile(r"^(\d{1,3}(?:\.\d{1,4})?)%$")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


def _quantity(value: str | int, *, what: str) -> Decimal:
    try:
        number = parse_quantity(value)
    except (ValueError, ArithmeticError):
        raise ValueError(f'"{value}" is not {what}') from None
    if number < 0:
        raise ValueError(f'"{value}" is negative')
    return number


class SchedulingClass(_Strict):
    """One entry of `schedulingClasses`. Unset keys leave the kernel's value alone."""

    policy: SchedPolicy | None = None
    priority: int | None = Field(default=None, ge=0, le=99)  # fifo/rr: 1-99; others: 0
    nice: int | None = Field(default=None, ge=-20, le=19)
    ioClass: IOClass | None = None
    ioPriority: int | None = Field(default=None, ge=0, le=7)
    # Extra CPU time a container may run over its quota in one period, as a CPU quantity
    # ("500m": half a period's worth): cgroup v2's cpu.max.burst.
    cpuBurst: str | int | None = None

    @field_validator("cpuBurst")
    @classmethod
    def _burst(cls, value: str | int | None) -> str | int | None:
        if value is not None:
            _quantity(value, what='a CPU quantity such as "500m"')
        return value

    @model_validator(mode="after")
    def _consistent(self) -> SchedulingClass:
        if self.priority is not None:
            if self.policy in REAL_TIME and self.priority < 1:
                raise ValueError(f"priority {self.priority}: policy {self.policy} needs 1 to 99")
            if self.policy not in REAL_TIME and self.priority != 0:
                raise ValueError(
                    f"priority {self.priority}: only the real-time policies fifo and rr take "
                    f"a priority above 0 (policy is {self.policy or 'not set'})"
                )
        if self.ioPriority is not None and self.ioClass not in ("rt", "be"):
            raise ValueError(
                f"ioPriority {self.ioPriority}: only ioClass rt or be takes a level "
                f"(ioClass is {self.ioClass or 'not set'})"
            )
        return self

    @property
    def real_time(self) -> bool:
        return self.policy in REAL_TIME or self.ioClass == "rt"

    def burst_cpus(self) -> Decimal | None:
        return None if self.cpuBurst is None else parse_quantity(self.cpuBurst)


class MemoryClass(_Strict):
    """One entry of `memoryClasses`: each a ratio of the container's memory limit ("50%") or a
    quantity ("256Mi"); `swapMax` a quantity or "max"."""

    min: str | int | None = None
    low: str | int | None = None
    high: str | int | None = None
    swapMax: str | int | None = None

    @field_validator("min", "low", "high")
    @classmethod
    def _level(cls, value: str | int | None) -> str | int | None:
        if isinstance(value, str) and (match := _RATIO.fullmatch(value)):
            if Decimal(match.group(1)) > 100:
                raise ValueError(f'"{value}" is above 100% of the memory limit')
            return value
        if value is not None:
            _quantity(value, what='a ratio of the memory limit such as "50%" or a quantity')
        return value

    @field_validator("swapMax")
    @classmethod
    def _swap(cls, value: str | int | None) -> str | int | None:
        if value is not None and value != "max":
            _quantity(value, what='a quantity such as "1Gi", or "max"')
        return value


def memory_bytes(value: str | int | None, limit: int) -> int | None:
    """A memory class's level in bytes for a container whose limit is `limit` (0: none);
    None when unset, or a ratio of a limit the container does not have."""
    if value is None:
        return None
    if isinstance(value, str) and (match := _RATIO.fullmatch(value)):
        return int(limit * Decimal(match.group(1)) / 100) if limit > 0 else None
    return int(parse_quantity(value))


class IrqIsolationConfig(_Strict):
    """`irqIsolation`: keep device interrupts off exclusive and isolated CPUs."""

    enabled: bool = False


# -- annotations ------------------------------------------------------------------------------


def task_class_keys(kind: TaskClassKind, container: str) -> list[str]:
    """Every key that can carry container's class of `kind`, first one present wins."""
    return [f"{_PREFIX[kind]}/container.{container}", f"{_PREFIX[kind]}/pod"]


def task_class_kind(key: str) -> TaskClassKind | None:
    for kind in TASK_CLASS_KINDS:
        if key == f"{_PREFIX[kind]}/pod" or key.startswith(f"{_PREFIX[kind]}/container."):
            return kind
    return None


@dataclass(frozen=True)
class TaskClassAccess(KindAccess[TaskClassKind]):
    """`classAccess.scheduling` and `.memory`: class -> namespace globs; unlisted: open to all."""


def _clipped(text: str) -> str:
    return text if len(text) <= _SHOWN else text[:_SHOWN] + "..."


def _check_name(kind: TaskClassKind, key: str, value: str) -> None:
    if not _NAME.fullmatch(value):
        raise ClassRequestError(
            "malformed",
            f'annotation "{key}": {kind} class name "{_clipped(value)}" is malformed: it must '
            f"match {CLASS_NAME_PATTERN}",
            key=key,
            value=_clipped(value),
        )


def resolve_task_class(
    annotations: Mapping[str, str],
    kind: TaskClassKind,
    container: str,
    *,
    namespace: str,
    classes: Collection[str] | None = None,
    access: TaskClassAccess | None = None,
) -> str | None:
    """The class of `kind` container's annotations ask for; None when none does. `classes`
    None: the configured classes are unknown (the webhook without --config), any well-formed
    name goes. Raises ClassRequestError (malformed, unknown or forbidden)."""
    access = access or TaskClassAccess()
    for key in task_class_keys(kind, container):
        if key not in annotations:
            continue
        value = annotations[key]
        _check_name(kind, key, value)
        access.check(
            kind, key, value, namespace=namespace, configured=classes, section=_SECTION[kind]
        )
        return value
    return None


def validate_task_class_annotations(annotations: Mapping[str, str]) -> None:
    """Refuses a malformed class name in any scheduling- or memory-class annotation."""
    for key, value in annotations.items():
        kind = task_class_kind(key)
        if kind is not None:
            _check_name(kind, key, value)


# -- cross-checks of a schema-valid configuration -----------------------------------------------


def task_class_problems(
    scheduling: Mapping[str, SchedulingClass],
    memory: Mapping[str, MemoryClass],
    access: Mapping[TaskClassKind, Mapping[str, list[str]]],
    balloon_refs: list[tuple[int, str | None, str | None]],
) -> list[str]:
    """One `key.path: reason` line per problem: names that must exist, and real-time classes
    not listed in `classAccess.scheduling`. `balloon_refs`: per balloon type, its index, its
    `schedulingClass` and its `memoryClass`."""
    problems = []
    configured: dict[TaskClassKind, Collection[str]] = {"scheduling": scheduling, "memory": memory}
    for kind in TASK_CLASS_KINDS:
        for name in access.get(kind, {}):
            if name not in configured[kind]:
                problems.append(
                    f"classAccess.{kind}.{name}: no {kind} class of that name is configured "
                    f"({_SECTION[kind]}: {listing(configured[kind])})"
                )
    for name, cls in scheduling.items():
        if cls.real_time and name not in access.get("scheduling", {}):
            what = f"policy {cls.policy}" if cls.policy in REAL_TIME else "ioClass rt"
            problems.append(
                f"schedulingClasses.{name}: {what} is real-time: list the class in "
                f"classAccess.scheduling.{name} with the namespaces that may use it"
            )
    for index, sched, mem in balloon_refs:
        refs: tuple[tuple[TaskClassKind, str | None, str], ...] = (
            ("scheduling", sched, "schedulingClass"),
            ("memory", mem, "memoryClass"),
        )
        for kind, ref, key in refs:
            if ref is not None and ref not in configured[kind]:
                problems.append(
                    f'policy.balloonTypes.{index}.{key}: {kind} class "{ref}" is not configured'
                    f" ({_SECTION[kind]}: {listing(configured[kind])})"
                )
    return problems


@dataclass(frozen=True)
class TaskClassSettings:
    """What the configuration says about scheduling- and memory-class requests; None
    configured classes: unknown (the webhook without --config), any well-formed name goes."""

    scheduling: Collection[str] | None = None
    memory: Collection[str] | None = None
    access: TaskClassAccess = field(default_factory=TaskClassAccess)

    def resolve(
        self, annotations: Mapping[str, str], container: str, namespace: str
    ) -> tuple[str | None, str | None]:
        """The scheduling class and the memory class container's annotations ask for;
        ClassRequestError as `resolve_task_class`."""
        sched = resolve_task_class(
            annotations,
            "scheduling",
            container,
            namespace=namespace,
            classes=self.scheduling,
            access=self.access,
        )
        mem = resolve_task_class(
            annotations,
            "memory",
            container,
            namespace=namespace,
            classes=self.memory,
            access=self.access,
        )
        return sched, mem
