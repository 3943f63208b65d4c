"""Errors the controllers raise when asked to put a container into a class.

The enforcer maps them to gRPC codes: `InvalidClassName` and `UnknownClass` to INVALID_ARGUMENT,
`ClassUnavailable` (RDT or block I/O missing on this node) to FAILED_PRECONDITION.
"""

from __future__ import annotations

from collections.abc import Collection

from resource_contract.classes import CLASS_NAME_PATTERN


class ClassError(Exception):
    """A class request that a controller cannot carry out."""


class InvalidClassName(ClassError, ValueError):
    def __init__(self, kind: str, name: str, why: str | None = None) -> None:
        super().__init__(
            f"{kind} class name {why}"
            if why
            else f'{kind} class name "{name}" is malformed: it must match {CLASS_NAME_PATTERN}'
        )
        self.name = name


class UnknownClass(ClassError, LookupError):
    def __init__(self, kind: str, name: str, configured: Collection[str]) -> None:
        listing = ", ".join(sorted(configured)) or "none"
        super().__init__(
            f'{kind} class "{name}" is not configured; configured {kind} classes: {listing}'
        )
        self.name = name


class ClassUnavailable(ClassError):
    """The node lacks the feature (no resctrl mounted, no blkio/io controller)."""


class RdtUnavailable(ClassUnavailable):
    pass


class BlockIOUnavailable(ClassUnavailable):
    pass


class ApplyError(Exception):
    """The kernel refused a write (other than the non-fatal cases each controller names)."""
