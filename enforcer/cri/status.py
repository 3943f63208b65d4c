"""The CRI transport's edge for refusals: the engine's refusal reasons as gRPC status codes.

The only place a `Reason` becomes a CRI status; also the codes after which a CreateContainer's
outcome is uncertain, and those that say the runtime could not be asked.
"""

from __future__ import annotations

import grpc

from enforcer.refusal import Reason

STATUS: dict[Reason, grpc.StatusCode] = {
    Reason.BAD_REQUEST: grpc.StatusCode.INVALID_ARGUMENT,
    Reason.FORBIDDEN: grpc.StatusCode.PERMISSION_DENIED,
    Reason.NO_ROOM: grpc.StatusCode.RESOURCE_EXHAUSTED,
    Reason.UNAVAILABLE: grpc.StatusCode.UNAVAILABLE,
    Reason.NOT_SUPPORTED: grpc.StatusCode.FAILED_PRECONDITION,
}


def status_of(reason: Reason) -> grpc.StatusCode:
    """The gRPC status the relay answers a refusal of this reason with."""
    return STATUS[reason]


# A CreateContainer answered with one of these may have created the container all the same.
UNCERTAIN = frozenset(
    code.value[0]
    for code in (
        grpc.StatusCode.CANCELLED,
        grpc.StatusCode.DEADLINE_EXCEEDED,
        grpc.StatusCode.UNAVAILABLE,
        grpc.StatusCode.UNKNOWN,
    )
)

# Status codes that mean the runtime could not be asked, rather than that it said no.
AWAY = frozenset(
    {grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.CANCELLED}
)
