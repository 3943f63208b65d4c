"""RDT and block-I/O class requests: which annotation wins, and whether the pod may have it.

Class names become resctrl group folders and cgroup settings, so a name is checked against
a strict pattern before anything else looks at it.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from fnmatch import fnmatchcase
from typing import Generic, Literal, TypeVar

from resource_contract.keys import DOMAIN, PEER_DOMAINS, container_key, pod_key

ClassKind = Literal["rdt", "blockio"]
CLASS_KINDS: tuple[ClassKind, ...] = ("rdt", "blockio")
K = TypeVar("K", bound=str)  # a kind of class

CLASS_NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$"
_CLASS_NAME = re.compile(CLASS_NAME_PATTERN)
# What the kernel keeps in the resctrl root (Documentation/filesystems/resctrl.rst): the
# folders `info`, `mon_groups` and `mon_data`, and the files of the root group. An RDT class
# becomes a folder there, so none of these names can be a class (resctrl is case-sensitive).
RESCTRL_RESERVED_NAMES = frozenset(
    {
        "info",
        "mon_groups",
        "mon_data",
        "tasks",
        "cpus",
        "cpus_list",
        "schemata",
        "mode",
        "size",
        "ctrl_hw_id",
        "mon_hw_id",
    }
)


def reserved_name_problem(kind: str, name: str) -> str | None:
    """Why `name` cannot be a `kind` class although it matches the pattern; None if it can."""
    if kind == "rdt" and name in RESCTRL_RESERVED_NAMES:
        return (
            f'"{name}" is reserved by the kernel in resctrl; RDT class names may not be '
            f"{', '.join(sorted(RESCTRL_RESERVED_NAMES))}"
        )
    return None


# Per kind: our key prefix, and the Kubernetes-beta domain that has no prefix of its own.
_PREFIX: dict[ClassKind, str] = {"rdt": "rdtclass", "blockio": "blockioclass"}
_BETA_DOMAIN: dict[ClassKind, str] = {
    "rdt": "rdt.resources.beta.kubernetes.io",
    "blockio": "blockio.resources.beta.kubernetes.io",
}
QOS_CLASSES = ("Guaranteed", "Burstable", "BestEffort")


def _scope_keys(kind: ClassKind, scope: str) -> tuple[list[str], list[str]]:
    """Our key, then the peers' keys, for one scope (`container.C` or `pod`)."""
    prefix = _PREFIX[kind]
    ours = [f"{prefix}.{DOMAIN}/{scope}"]
    peers = [f"{prefix}.{d}/{scope}" for d in PEER_DOMAINS] + [f"{_BETA_DOMAIN[kind]}/{scope}"]
    return ours, peers


# class_keys by (kind, container name), for names up to a DNS label's 63 characters; at most
# _KEYS_ENTRIES of them (well under 1 MiB), emptied when full.
_KEYS: dict[tuple[str, str], tuple[str, ...]] = {}
_KEYS_ENTRIES = 2048


def class_keys(kind: ClassKind, container: str) -> list[str]:
    """Every key that can carry container's class, first one present wins."""
    return list(_class_keys(kind, container))


def _class_keys(kind: ClassKind, container: str) -> tuple[str, ...]:
    found = _KEYS.get((kind, container))
    if found is not None:
        return found
    c_ours, c_peers = _scope_keys(kind, f"container.{container}")
    p_ours, p_peers = _scope_keys(kind, "pod")
    keys = (*c_ours, *c_peers, *p_ours, *p_peers)
    if len(container) <= 63:
        if len(_KEYS) >= _KEYS_ENTRIES:
            _KEYS.clear()
        _KEYS[(kind, container)] = keys
    return keys


def is_class_key(key: str) -> ClassKind | None:
    """The kind of class a key asks for, whoever's dialect it is in; None if not a class key."""
    for kind in CLASS_KINDS:
        prefix = _PREFIX[kind]
        domains = [f"{prefix}.{DOMAIN}"] + [f"{prefix}.{d}" for d in PEER_DOMAINS]
        domains.append(_BETA_DOMAIN[kind])
        for domain in domains:
            if key == f"{domain}/pod" or key.startswith(f"{domain}/container."):
                return kind
    return None


def is_runtime_class_key(key: str) -> bool:
    """A class key that containerd's own RDT and block-I/O support reads too (the Kubernetes
    beta dialect); the enforcer takes these classes over, so the runtime must not see them."""
    return any(key.startswith(f"{domain}/") for domain in _BETA_DOMAIN.values())


@dataclass(frozen=True)
class KindAccess(Generic[K]):
    """`classAccess` rules of some kinds of class: kind -> class -> namespace globs. An
    unlisted class is open to every namespace."""

    rules: Mapping[K, Mapping[str, tuple[str, ...]]] = field(default_factory=dict)

    def patterns(self, kind: K, name: str) -> tuple[str, ...] | None:
        return self.rules.get(kind, {}).get(name)

    def allows(self, kind: K, name: str, namespace: str) -> bool:
        patterns = self.patterns(kind, name)
        return patterns is None or any(fnmatchcase(namespace, p) for p in patterns)

    def check(
        self,
        kind: K,
        key: str,
        value: str,
        *,
        namespace: str,
        configured: Collection[str] | None,
        section: str = "",
    ) -> None:
        """Refuses (ClassRequestError) the `kind` class `value` asked for by annotation `key`
        when it is not configured or `namespace` may not use it."""
        check_usable(
            key,
            value,
            kind,
            namespace=namespace,
            configured=configured,
            allows=lambda name: self.allows(kind, name, namespace),
            allowed=listing(self.patterns(kind, value) or ()),
            section=section,
        )


@dataclass(frozen=True)
class ClassAccess(KindAccess[ClassKind]):
    """`classAccess` of the configuration for RDT and block-I/O classes."""


@dataclass(frozen=True)
class ClassRequest:
    kind: ClassKind
    name: str
    key: str | None  # the annotation it came from; None for the QoS-class default

    @property
    def explicit(self) -> bool:
        return self.key is not None


class ClassRequestError(ValueError):
    """A class request that must be refused. `reason` is malformed, unknown or forbidden."""

    def __init__(self, reason: str, message: str, *, key: str, value: str) -> None:
        super().__init__(message)
        self.reason = reason
        self.key = key
        self.value = value

    @property
    def permission_denied(self) -> bool:
        return self.reason == "forbidden"


def _check_name(key: str, value: str, kind: ClassKind) -> None:
    if not _CLASS_NAME.fullmatch(value):
        raise ClassRequestError(
            "malformed",
            f'annotation "{key}": class name "{value}" is malformed: '
            f"it must match {CLASS_NAME_PATTERN}",
            key=key,
            value=value,
        )
    reserved = reserved_name_problem(kind, value)
    if reserved is not None:
        raise ClassRequestError(
            "malformed", f'annotation "{key}": class name {reserved}', key=key, value=value
        )


def listing(names: Collection[str]) -> str:
    """Names for a message: sorted, comma-separated, "none" when there are none."""
    return ", ".join(sorted(names)) or "none"


def check_usable(
    key: str,
    value: str,
    what: str,
    *,
    namespace: str,
    configured: Collection[str] | None,
    allows: Callable[[str], bool],
    allowed: str,
    section: str = "",
) -> None:
    """Refuses the `what` class `value` asked for by annotation `key`: "unknown" when it is not
    among `configured` (None: unknown, any name goes; `section`: the configuration key that
    lists them), "forbidden" when `allows(value)` says `namespace` may not use it (`allowed`:
    the namespaces that may, for the message)."""
    if configured is not None and value not in configured:
        where = f" ({section})" if section else ""
        raise ClassRequestError(
            "unknown",
            f'annotation "{key}": {what} class "{value}" is not configured; '
            f"configured {what} classes{where}: {listing(configured)}",
            key=key,
            value=value,
        )
    if not allows(value):
        usable = [n for n in (configured or ()) if allows(n)]
        raise ClassRequestError(
            "forbidden",
            f'annotation "{key}": namespace "{namespace}" may not use {what} class '
            f'"{value}" (allowed namespaces: {allowed})'
            f"; {what} classes namespace {namespace} may use: {listing(usable)}",
            key=key,
            value=value,
        )


def resolve_class(
    annotations: Mapping[str, str],
    kind: ClassKind,
    container: str,
    *,
    qos: str,
    namespace: str,
    configured: Collection[str] | None = None,
    access: ClassAccess | None = None,
) -> ClassRequest | None:
    """The class container runs in, or None for the root group / no class.

    `configured` None means the configured classes are unknown (the webhook without --config):
    any well-formed name is accepted and there is no QoS-class default.
    Raises ClassRequestError for a request that must be refused.
    """
    access = access or ClassAccess()
    for key in _class_keys(kind, container):
        if key not in annotations:
            continue
        value = annotations[key]
        _check_name(key, value, kind)
        access.check(kind, key, value, namespace=namespace, configured=configured)
        return ClassRequest(kind, value, key)
    # Nobody asked: the QoS class's namesake when it exists. A restricted default is skipped
    # rather than refused, since the pod's author did not ask for it.
    if configured is not None and qos in configured and access.allows(kind, qos, namespace):
        return ClassRequest(kind, qos, None)
    return None


def validate_class_annotations(annotations: Mapping[str, str]) -> None:
    """Refuses a malformed class name in any class annotation, for any container."""
    for key, value in annotations.items():
        kind = is_class_key(key)
        if kind is not None:
            _check_name(key, value, kind)


__all__ = [
    "CLASS_KINDS",
    "CLASS_NAME_PATTERN",
    "QOS_CLASSES",
    "RESCTRL_RESERVED_NAMES",
    "ClassAccess",
    "ClassKind",
    "ClassRequest",
    "ClassRequestError",
    "KindAccess",
    "check_usable",
    "class_keys",
    "container_key",
    "is_class_key",
    "is_runtime_class_key",
    "listing",
    "pod_key",
    "reserved_name_problem",
    "resolve_class",
    "validate_class_annotations",
]
