"""CPU preferences a pod's author sets: per container first, then per pod; ours before peers'."""

from __future__ import annotations

from collections.abc import Mapping

from resource_contract.keys import DOMAIN, PEER_DOMAINS, container_key, pod_key

PREFERENCES: tuple[str, ...] = (
    "prefer-isolated-cpus",
    "prefer-shared-cpus",
    "prefer-reserved-cpus",
    "cpu.preserve",
)
_DOMAINS = (DOMAIN, *PEER_DOMAINS)
_VALUES = {"true": True, "false": False}


class PreferenceError(ValueError):
    def __init__(self, key: str, value: str) -> None:
        super().__init__(
            f'annotation "{key}": value "{value}" is not allowed; use "true" or "false"'
        )
        self.key = key
        self.value = value


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


def is_preference_key(key: str) -> bool:
    for name in PREFERENCES:
        for domain in _DOMAINS:
            base = f"{name}.{domain}/"
            if key == f"{base}pod" or key.startswith(f"{base}container."):
                return True
    return False


def validate_preference_annotations(annotations: Mapping[str, str]) -> None:
    """Refuses any preference annotation, for any container, whose value is not true/false."""
    for key, value in annotations.items():
        if is_preference_key(key):
            _parse(key, value)
