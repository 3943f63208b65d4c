"""Which thread may change the engine: the worker's, checked on every call that changes it.

The engine's state (the policy, the registry, the state file, the runtime's pinnings) changes
in one order, on one thread, and so needs no locks: the worker (`enforcer.worker.EngineWorker`)
binds its thread when it starts (`bind`), and holds the engine while that thread lives. Until a
worker binds it, or once its thread has ended, the engine belongs to whoever calls it (the
start-up before the worker runs, a stop after it closed, a test that drives the engine
directly): there is nothing to race with then. A call that would change the engine from
another thread while a worker holds it raises `OffWorker`, naming the call and both threads:
the bug is said where it is, instead of a race that corrupts a placement one day in a hundred.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable
from typing import Concatenate, ParamSpec, Protocol, TypeVar


class OffWorker(RuntimeError):
    """A call that changes the engine, made off the engine's worker thread."""


class WorkerThread:
    """The thread that holds the engine now, if any."""

    def __init__(self) -> None:
        self._held_by: threading.Thread | None = None

    def bind(self) -> None:
        """The calling thread (the worker's, as it starts) holds the engine from now on."""
        self._held_by = threading.current_thread()

    @property
    def held_by(self) -> threading.Thread | None:
        return self._held_by

    def check(self, call: str) -> None:
        """OffWorker when a live worker thread holds the engine and this is not it."""
        held_by = self._held_by
        if held_by is None or held_by is threading.current_thread() or not held_by.is_alive():
            return
        raise OffWorker(
            f"Enforcer.{call} changes the engine and runs on its worker thread "
            f"({held_by.name}), but was called on thread {threading.current_thread().name}: "
            "submit it to the worker (EngineWorker.run, submit or start_soon)"
        )


class HeldByWorker(Protocol):
    @property
    def worker_thread(self) -> WorkerThread: ...


S = TypeVar("S", bound=HeldByWorker)
P = ParamSpec("P")
R = TypeVar("R")


def on_worker(method: Callable[Concatenate[S, P], R]) -> Callable[Concatenate[S, P], R]:
    """Marks a method that changes the engine: it runs on the worker thread, checked."""

    @functools.wraps(method)
    def checked(self: S, /, *args: P.args, **kwargs: P.kwargs) -> R:
        self.worker_thread.check(method.__name__)
        return method(self, *args, **kwargs)

    return checked
