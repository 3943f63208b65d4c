"""The one small interface every controller (cpuset, RDT, block I/O) offers the engine.

The engine calls every registered controller (`enforcer.controllers.registry`) at the same
points of a container's life, in the same order:

- `admit`: CreateContainer, before the container exists: the request with what this
  controller will apply; a `Refusal` for an explicit request it cannot carry out.
- `start`: the container runs (its cgroup and tasks exist): apply.
- `update`: its request or the configuration changed: apply again.
- `repin`: its cpuset or memory nodes changed.
- `stop`: it stopped or was removed: give back what the controller holds for it.
- `verify`: what the kernel has for it that differs from the decision (the periodic sweep,
  and after every start and re-pin); the engine repairs and verifies again.

And for the node as a whole: `remember` then `cpus` (the CPU classes the policy wants, CPU by
CPU, after every change of placements: `remember` reads what the writes will replace, the
engine saves it in the state file, and only then does `cpus` write), `saved`/`restore` (what
the controller must remember across a crash, kept in the state file) and `shutdown` (the
enforcer stops: put back what it changed).

And for the configuration: `syntax` (any machine, run by `parse_config`), `check` (its part of
a configuration against this node's hardware, nothing written: `check-config`) and
`configure` (keep and write its part; ConfigError and nothing changed when it is refused).

A controller's lifecycle methods never raise for a running container: failures come back as
an `Outcome` the engine logs and counts.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Protocol

from enforcer.controllers.errors import ClassError, ClassUnavailable
from enforcer.decode import ContainerRequest
from enforcer.refusal import Reason, Refusal
from resource_contract.config import Config


def class_refused(request: ContainerRequest, exc: ClassError) -> Refusal:
    """The refusal of `request` for a class error: NOT_SUPPORTED when the node lacks the
    feature, BAD_REQUEST for a malformed or unknown class."""
    reason = Reason.NOT_SUPPORTED if isinstance(exc, ClassUnavailable) else Reason.BAD_REQUEST
    return Refusal(reason, f"pod {request.namespace}/{request.pod_name}: {exc}")


def admit_class(
    request: ContainerRequest,
    name: str | None,
    explicit: bool,
    check: Callable[..., bool],
    without: Callable[[ContainerRequest], ContainerRequest],
) -> ContainerRequest:
    """A class controller's `admit`: the request as it is when its class `name` will be
    applied (`check(name, explicit=...)`), `without(request)` when a default would be skipped,
    a Refusal for an explicit request the controller cannot carry out."""
    if name is None:
        return request
    try:
        if check(name, explicit=explicit):
            return request
    except ClassError as exc:
        raise class_refused(request, exc) from None
    return without(request)


@dataclass(frozen=True)
class Roots:
    """Where a controller finds this node's kernel interfaces; None: not given (check-config
    then skips that hardware and says so)."""

    cgroupfs: str | None = "/sys/fs/cgroup"
    sysfs: str | None = "/sys"
    resctrl: str | None = "/sys/fs/resctrl"
    procfs: str | None = "/proc"


@dataclass(frozen=True)
class Target:
    """One container as the controllers see it: where it lives, what it asked for and the
    cpuset and memory nodes decided for it."""

    container_id: str
    cgroup_parent: str
    request: ContainerRequest
    cpus: str
    mems: str
    balloon: str | None = None  # the balloons policy's instance, TYPE[N]


class Result(Enum):
    APPLIED = "applied"
    SKIPPED = "skipped"  # nothing to do for this container (no class, a default not configured)
    FAILED = "failed"


@dataclass(frozen=True)
class Outcome:
    """What one controller did for one container."""

    controller: str
    result: Result
    name: str = ""  # the class applied, when the controller applies classes
    detail: str = ""
    warnings: tuple[str, ...] = ()


@dataclass(frozen=True)
class Difference:
    """What the kernel has for a container that differs from the decision. `by_runtime`: the
    runtime writes this value (the cpuset, through the OCI spec or a container update), so the
    repair goes through the runtime; otherwise the controller's `start` applies it again."""

    controller: str
    detail: str
    by_runtime: bool = False
    seen: tuple[str, ...] = ()  # the values read, in the controller's own order


@dataclass
class Findings:
    """A configuration checked against the hardware: problems (by key path), warnings, and
    notes on what could not be checked and why."""

    problems: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def extend(self, other: Findings) -> None:
        self.problems += [p for p in other.problems if p not in self.problems]
        self.warnings += other.warnings
        self.notes += other.notes


class Controller(Protocol):
    """See the module's docstring for when the engine calls each method."""

    name: str  # the `controller` label of the metrics

    @staticmethod
    def syntax(config: Config) -> list[str]:
        """Problems of this controller's section that any machine would have."""
        ...

    def check(self, config: Config, *, left_out: frozenset[str] = frozenset()) -> Findings:
        """This controller's section against the hardware, writing nothing. `left_out`: the
        keys that had schema problems and were removed before the check."""
        ...

    def configure(self, config: Config) -> list[str]:
        """Keeps and writes this controller's section; returns warnings. ConfigError (nothing
        changed) when refused, ApplyError when the kernel refused a write."""
        ...

    def validate(self, config: Config) -> None:
        """What `configure` would refuse, without writing anything (ConfigError)."""
        ...

    def admit(self, request: ContainerRequest) -> ContainerRequest: ...

    def start(self, target: Target) -> Outcome: ...

    def update(self, target: Target) -> Outcome: ...

    def repin(self, target: Target) -> Outcome: ...

    def stop(self, target: Target) -> Outcome: ...

    def verify(self, target: Target) -> Difference | None: ...

    def remember(self, classes: Mapping[int, str]) -> bool:
        """Reads, writing nothing, what `cpus(classes)` would overwrite for the first time.
        Returns whether `saved` changed (the engine then writes the state before `cpus`)."""
        ...

    def cpus(self, classes: Mapping[int, str]) -> bool:
        """The CPU classes the policy wants now (CPU -> class). Returns whether `saved`
        changed (the engine then writes the state)."""
        ...

    def saved(self) -> dict[str, Any]: ...

    def restore(self, saved: Mapping[str, Any]) -> None: ...

    def shutdown(self) -> None: ...


class PerContainer:
    """The node-wide methods of a controller that acts only on containers: nothing to do."""

    def remember(self, classes: Mapping[int, str]) -> bool:
        return False

    def cpus(self, classes: Mapping[int, str]) -> bool:
        return False

    def saved(self) -> dict[str, Any]:
        return {}

    def restore(self, saved: Mapping[str, Any]) -> None:
        return None

    def shutdown(self) -> None:
        return None  # what it wrote lives in the containers' own cgroups and groups
