"""Balloon-type requests a pod's author sets: which annotation wins, and whether it may have it.

For container C the first key present wins: ours per container, ours per pod, then the NRI
balloons policy's per container, per pod and its bare pod-wide key. A type name is checked
against the same strict pattern as class names before anything else looks at it.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from fnmatch import fnmatchcase

from resource_contract.classes import CLASS_NAME_PATTERN, ClassRequestError
from resource_contract.keys import DOMAIN

_NAME = re.compile(CLASS_NAME_PATTERN)
PEER_BALLOON_DOMAIN = "balloons.resource-policy.nri.io"
_OURS = f"balloon.{DOMAIN}"
_PEERS = f"balloon.{PEER_BALLOON_DOMAIN}"


def balloon_keys(container: str) -> list[str]:
    """Every key that can carry container's balloon type, first one present wins."""
    return [
        f"{_OURS}/container.{container}",
        f"{_OURS}/pod",
        f"{_PEERS}/container.{container}",
        f"{_PEERS}/pod",
        _PEERS,
    ]


def is_balloon_key(key: str) -> bool:
    for domain in (_OURS, _PEERS):
        if key == f"{domain}/pod" or key.startswith(f"{domain}/container."):
            return True
    return key == _PEERS


@dataclass(frozen=True)
class BalloonAccess:
    """`classAccess.balloon`: type -> namespace globs. An unlisted type is open to all."""

    rules: Mapping[str, tuple[str, ...]] = field(default_factory=dict)

    def allows(self, name: str, namespace: str) -> bool:
        patterns = self.rules.get(name)
        return patterns is None or any(fnmatchcase(namespace, p) for p in patterns)


@dataclass(frozen=True)
class BalloonRequest:
    name: str
    key: str  # the annotation it came from


def _listing(names: Collection[str]) -> str:
    return ", ".join(names) or "none"


def _check_name(key: str, value: str) -> None:
    if not _NAME.fullmatch(value):
        raise ClassRequestError(
            "malformed",
            f'annotation "{key}": balloon type "{value}" is malformed: it must match '
            f"{CLASS_NAME_PATTERN}",
            key=key,
            value=value,
        )


def resolve_balloon(
    annotations: Mapping[str, str],
    container: str,
    *,
    namespace: str,
    types: Collection[str] | None = None,
    access: BalloonAccess | None = None,
) -> BalloonRequest | None:
    """The balloon type container's annotations ask for; None when none does (the policy then
    goes by namespace). `types` None: the configured types are unknown (the webhook without
    --config, or a policy other than balloons), so any well-formed name goes.
    Raises ClassRequestError (malformed, unknown or forbidden)."""
    access = access or BalloonAccess()
    for key in balloon_keys(container):
        if key not in annotations:
            continue
        value = annotations[key]
        _check_name(key, value)
        if types is not None and value not in types:
            raise ClassRequestError(
                "unknown",
                f'annotation "{key}": balloon type "{value}" is not configured; configured '
                f"balloon types: {_listing(types)}",
                key=key,
                value=value,
            )
        if not access.allows(value, namespace):
            patterns = access.rules.get(value, ())
            usable = [t for t in (types or ()) if access.allows(t, namespace)]
            raise ClassRequestError(
                "forbidden",
                f'annotation "{key}": namespace "{namespace}" may not use balloon type '
                f'"{value}" (allowed namespaces: {_listing(patterns)}); balloon types '
                f"namespace {namespace} may use: {_listing(usable)}",
                key=key,
                value=value,
            )
        return BalloonRequest(value, key)
    return None


def validate_balloon_annotations(annotations: Mapping[str, str]) -> None:
    """Refuses a malformed balloon type in any balloon annotation, for any container."""
    for key, value in annotations.items():
        if is_balloon_key(key):
            _check_name(key, value)
