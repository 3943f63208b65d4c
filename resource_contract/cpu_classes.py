"""CPU-class requests a pod's author sets for exclusive CPUs: which annotation wins, and
whether the pod may have it.

For container C the first key present wins: `cpuclass.resource-enforcer.dev/container.C`, then
`cpuclass.resource-enforcer.dev/pod` (the contract's; the peers have no such annotation). A
class name is checked against the strict class-name pattern before anything else looks at it,
and a value is quoted in a message only up to a bound, so a hostile annotation costs nothing.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from fnmatch import fnmatchcase

from resource_contract.classes import CLASS_NAME_PATTERN, ClassRequestError, check_usable
from resource_contract.keys import DOMAIN

_NAME = re.compile(CLASS_NAME_PATTERN)
_PREFIX = f"cpuclass.{DOMAIN}"
_SHOWN = 80  # characters of a bad value quoted in a message


def cpu_class_keys(container: str) -> list[str]:
    """Every key that can carry container's CPU class, first one present wins."""
    return [f"{_PREFIX}/container.{container}", f"{_PREFIX}/pod"]


def is_cpu_class_key(key: str) -> bool:
    return key == f"{_PREFIX}/pod" or key.startswith(f"{_PREFIX}/container.")


@dataclass(frozen=True)
class CpuClassAccess:
    """`classAccess.cpu`: CPU class -> namespace globs. An unlisted class is open to all."""

    rules: Mapping[str, tuple[str, ...]] = field(default_factory=dict)

    def allows(self, name: str, namespace: str) -> bool:
        patterns = self.rules.get(name)
        return patterns is None or any(fnmatchcase(namespace, p) for p in patterns)


@dataclass(frozen=True)
class CpuClassRequest:
    name: str
    key: str  # the annotation it came from


def _clipped(text: str) -> str:
    return text if len(text) <= _SHOWN else text[:_SHOWN] + "..."


def _check_name(key: str, value: str) -> None:
    if not _NAME.fullmatch(value):
        raise ClassRequestError(
            "malformed",
            f'annotation "{key}": CPU class name "{_clipped(value)}" is malformed: it must '
            f"match {CLASS_NAME_PATTERN}",
            key=key,
            value=_clipped(value),
        )


def resolve_cpu_class(
    annotations: Mapping[str, str],
    container: str,
    *,
    namespace: str,
    classes: Collection[str] | None = None,
    access: CpuClassAccess | None = None,
) -> CpuClassRequest | None:
    """The CPU class container's annotations ask for; None when none does. `classes` None: the
    configured classes are unknown (the webhook without --config), so any well-formed name goes.
    Raises ClassRequestError (malformed, unknown or forbidden)."""
    access = access or CpuClassAccess()
    for key in cpu_class_keys(container):
        if key not in annotations:
            continue
        value = annotations[key]
        _check_name(key, value)
        check_usable(
            key,
            value,
            "CPU",
            namespace=namespace,
            configured=classes,
            allows=lambda name: access.allows(name, namespace),
            allowed=", ".join(access.rules.get(value, ())) or "none",
            section="cpuClasses",
        )
        return CpuClassRequest(value, key)
    return None


def validate_cpu_class_annotations(annotations: Mapping[str, str]) -> None:
    """Refuses a malformed class name in any CPU-class annotation, for any container."""
    for key, value in annotations.items():
        if is_cpu_class_key(key):
            _check_name(key, value)
