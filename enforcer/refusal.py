"""Why the core refuses a container: one reason per refusal, mapped to a status by each transport.

The core (decoding, policies, classes, the engine) raises `Refusal`s and knows no status codes;
the CRI relay's adapter maps each reason to a gRPC status, the NRI adapter to its own.
"""

from __future__ import annotations

import enum


class Reason(enum.Enum):
    BAD_REQUEST = "bad-request"  # malformed or contradictory: the request must change
    FORBIDDEN = "forbidden"  # well-formed, but this namespace may not have it
    NO_ROOM = "no-room"  # the node has not enough free of what was asked
    UNAVAILABLE = "unavailable"  # the enforcer cannot decide now: retry later
    NOT_SUPPORTED = "not-supported"  # the node lacks what was asked for (RDT missing)


class Refusal(Exception):
    """A container the core refuses, with the reason and a message naming what and why."""

    def __init__(self, reason: Reason, message: str) -> None:
        super().__init__(message)
        self.reason = reason
