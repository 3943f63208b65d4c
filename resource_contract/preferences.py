"""CPU preferences a pod's author sets: which key wins, which values are valid, and which
namespaces may ask for each (`preferenceAccess`).

Per container first, then per pod; ours before the peers'. Only a preference set to "true"
asks for something (isolated, shared or reserved CPUs, or kubelet's pinning kept); "false"
declines it, so it needs no access and is allowed in every namespace.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field
from fnmatch import fnmatchcase

from resource_contract.keys import DOMAIN, PEER_DOMAINS, container_key, pod_key

PREFERENCES: tuple[str, ...] = (
    "prefer-isolated-cpus",
    "prefer-shared-cpus",
    "prefer-reserved-cpus",
    "cpu.preserve",
)
# Preferences that reach past a container's own share (kubelet's pinning kept over others'
# exclusive CPUs, the CPUs reserved for the system): by default only `policy.reservedNamespaces`
# may ask for them. The others are open to every namespace by default.
RESTRICTED_PREFERENCES: tuple[str, ...] = ("cpu.preserve", "prefer-reserved-cpus")
EVERYWHERE: tuple[str, ...] = ("*",)

_DOMAINS = (DOMAIN, *PEER_DOMAINS)
_VALUES = {"true": True, "false": False}


class PreferenceError(ValueError):
    def __init__(self, key: str, value: str) -> None:
        super().__init__(
            f'annotation "{key}": value "{value}" is not allowed; use "true" or "false"'
        )
        self.key = key
        self.value = value


class PreferenceForbidden(ValueError):
    """A preference the pod's namespace may not ask for (`preferenceAccess`)."""

    def __init__(
        self, key: str, preference: str, namespace: str, patterns: Collection[str]
    ) -> None:
        allowed = ", ".join(patterns) or "none"
        super().__init__(
            f'annotation "{key}": namespace "{namespace}" may not use {preference} '
            f"(allowed namespaces: {allowed}; set by preferenceAccess.{preference})"
        )
        self.key = key
        self.preference = preference
        self.namespace = namespace
        self.patterns = tuple(patterns)


@dataclass(frozen=True)
class PreferenceAccess:
    """`preferenceAccess` of the configuration: preference -> namespace globs (shell-style,
    matched with fnmatchcase). A preference that is not listed is open to every namespace, so
    `PreferenceAccess()` allows everything (the webhook without a configuration)."""

    rules: Mapping[str, tuple[str, ...]] = field(default_factory=dict)

    @classmethod
    def defaults(
        cls,
        reserved_namespaces: Iterable[str],
        overrides: Mapping[str, Iterable[str] | None] | None = None,
    ) -> PreferenceAccess:
        """The contract's defaults (restricted preferences: `reserved_namespaces`; the others:
        everywhere), with the configured lists in `overrides` taking their place."""
        reserved = tuple(reserved_namespaces)
        rules: dict[str, tuple[str, ...]] = {}
        for name in PREFERENCES:
            configured = (overrides or {}).get(name)
            if configured is not None:
                rules[name] = tuple(configured)
            else:
                rules[name] = reserved if name in RESTRICTED_PREFERENCES else EVERYWHERE
        return cls(rules)

    def patterns(self, preference: str) -> tuple[str, ...] | None:
        return self.rules.get(preference)

    def allows(self, preference: str, namespace: str) -> bool:
        patterns = self.patterns(preference)
        return patterns is None or any(fnmatchcase(namespace, p) for p in patterns)


def preference_keys(name: str, container: str) -> list[str]:
    return [container_key(name, d, container) for d in _DOMAINS] + [
        pod_key(name, d) for d in _DOMAINS
    ]


def _parse(key: str, value: str) -> bool:
    try:
        return _VALUES[value]
    except KeyError:
        raise PreferenceError(key, value) from None


def resolve_preference(annotations: Mapping[str, str], name: str, container: str) -> bool | None:
    """The preference for container, or None when no annotation sets it."""
    for key in preference_keys(name, container):
        if key in annotations:
            return _parse(key, annotations[key])
    return None


def preference_of(key: str) -> str | None:
    """The preference an annotation key sets, in any dialect and scope; None for other keys."""
    for name in PREFERENCES:
        for domain in _DOMAINS:
            base = f"{name}.{domain}/"
            if key == f"{base}pod" or key.startswith(f"{base}container."):
                return name
    return None


def is_preference_key(key: str) -> bool:
    return preference_of(key) is not None


def validate_preference_annotations(annotations: Mapping[str, str]) -> None:
    """Refuses any preference annotation, for any container, whose value is not true/false."""
    for key, value in annotations.items():
        if is_preference_key(key):
            _parse(key, value)


def check_preference_access(
    annotations: Mapping[str, str], namespace: str, access: PreferenceAccess
) -> None:
    """Refuses (PreferenceForbidden) the first preference annotation set to "true", for any
    container of the pod, that `namespace` may not use. Values are checked first
    (`validate_preference_annotations`); "false" asks for nothing and is always allowed."""
    for key, value in annotations.items():
        if value != "true":
            continue
        preference = preference_of(key)
        if preference is not None and not access.allows(preference, namespace):
            raise PreferenceForbidden(key, preference, namespace, access.patterns(preference) or ())
