"""How the fault suite's kubelet treats a CRI call's answer: which codes leave the call
uncertain, which are worth repeating, which are the enforcer's refusals; retrying as kubelet's
next sync would; the reactions after an uncertain CreateContainer, and how a start ended."""

from __future__ import annotations

import enum
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

import grpc

from tests.support.kubelet import RunningPod

T = TypeVar("T")
CALL_TIMEOUT = 15.0
# How long kubelet's retries of a call the relay or the runtime cannot answer go on before the
# suite gives up on that call (an enforcer restart takes about 1.5 s here).
RETRY_SECONDS = 30.0
RETRY_PAUSE = 0.1
Code = grpc.StatusCode
# Outcomes after which the call may or may not have happened.
UNCERTAIN = frozenset({Code.UNAVAILABLE, Code.DEADLINE_EXCEEDED, Code.CANCELLED, Code.UNKNOWN})
# Outcomes after which a call is worth repeating as it is.
TRANSIENT = frozenset({Code.UNAVAILABLE, Code.DEADLINE_EXCEEDED, Code.CANCELLED})
# The enforcer's refusals: the pod cannot be placed as asked.
REFUSALS = frozenset(
    {
        Code.RESOURCE_EXHAUSTED,
        Code.INVALID_ARGUMENT,
        Code.PERMISSION_DENIED,
        Code.FAILED_PRECONDITION,
    }
)


class Reaction(enum.Enum):
    """What the emulated kubelet does after a CreateContainer whose outcome it does not know."""

    RETRY_SAME = "retry-same"
    RETRY_NEXT = "retry-next"
    GIVE_UP = "give-up"


@dataclass(frozen=True)
class Outcome:
    """How an attempt to start a pod ended."""

    pod: RunningPod | None  # the pod, running, when it started
    code: Code | None = None  # else the refusal or failure
    details: str = ""

    @property
    def started(self) -> bool:
        return self.pod is not None


class NodeError(RuntimeError):
    """A call kept failing beyond kubelet's patience."""


def transient(exc: grpc.RpcError) -> bool:
    """An answer worth repeating the call for: the relay or the runtime is away or starting
    (containerd answers UNKNOWN "server is not initialized yet" for a moment after it starts)."""
    return exc.code() in TRANSIENT or (
        exc.code() == Code.UNKNOWN and "not initialized" in (exc.details() or "")
    )


def retrying(call: Callable[[], T], *, gone_ok: bool = False) -> T | None:
    """`call`, retried while the relay or the runtime cannot answer; with `gone_ok`, NOT_FOUND
    counts as done (None)."""
    deadline = time.monotonic() + RETRY_SECONDS
    while True:
        try:
            return call()
        except grpc.RpcError as exc:
            if gone_ok and exc.code() == Code.NOT_FOUND:
                return None
            if transient(exc) and time.monotonic() < deadline:
                time.sleep(RETRY_PAUSE)
                continue
            raise
