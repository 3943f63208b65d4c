"""The NRI transport's edge for refusals: the engine's refusal reasons as ttrpc errors.

The only place a `Reason` becomes an NRI answer. ttrpc carries gRPC's status codes as numbers;
a refusal gets the code the CRI relay answers the same reason with, so kubelet reads the same
status in either mode.
"""

from __future__ import annotations

from enforcer.nri.connection import RESOURCE_EXHAUSTED, UNAVAILABLE, TtrpcError
from enforcer.refusal import Reason, Refusal

INVALID_ARGUMENT = 3
PERMISSION_DENIED = 7
FAILED_PRECONDITION = 9

CODES: dict[Reason, int] = {
    Reason.BAD_REQUEST: INVALID_ARGUMENT,
    Reason.FORBIDDEN: PERMISSION_DENIED,
    Reason.NO_ROOM: RESOURCE_EXHAUSTED,
    Reason.UNAVAILABLE: UNAVAILABLE,
    Reason.NOT_SUPPORTED: FAILED_PRECONDITION,
}


def refusal_error(refusal: Refusal) -> TtrpcError:
    """The ttrpc error a handler answers the runtime with for this refusal."""
    return TtrpcError(CODES[refusal.reason], str(refusal))
