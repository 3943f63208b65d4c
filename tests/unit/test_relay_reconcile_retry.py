"""The relay's reconciliation at the start is retried after any failure, not only the runtime
being away: a failure left to end it would leave every create refused for ever ("has not yet
read the runtime") while the process looked alive. The NRI plugin retries the same way."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, cast

import pytest

from enforcer.app import run as relay_run
from enforcer.app.metrics_endpoint import MetricsEndpoint
from enforcer.app.run import _reconcile_until_done
from enforcer.engine import Enforcer
from enforcer.engine.ports import RuntimeAway
from enforcer.relay.service import CRIService
from enforcer.state import StateStore


class _Worker:
    """Runs the attempts in order: each raises what it holds, or returns it."""

    def __init__(self, outcomes: list[object]) -> None:
        self.outcomes = outcomes
        self.calls = 0

    async def run(self, fn: Callable[..., Any], *args: Any) -> Any:
        outcome = self.outcomes[self.calls]
        self.calls += 1
        if isinstance(outcome, BaseException):
            raise outcome
        return outcome


class _Service:
    def __init__(self, worker: _Worker) -> None:
        self.worker = worker


class _Health:
    def __init__(self) -> None:
        self.reconcile_failed: str | None = "not yet"
        self.seen: list[str | None] = []

    def __setattr__(self, name: str, value: object) -> None:
        if name == "reconcile_failed" and hasattr(self, "seen"):
            self.seen.append(cast("str | None", value))
        super().__setattr__(name, value)


def test_an_unexpected_failure_is_logged_and_retried_until_it_works(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(relay_run, "RECONCILE_RETRY_SECONDS", 0.0)
    worker = _Worker([KeyError("registry"), RuntimeAway("containerd is restarting"), True])
    health = _Health()
    asyncio.run(
        _reconcile_until_done(
            cast(CRIService, _Service(worker)),
            cast(Enforcer, None),
            cast(StateStore, None),
            asyncio.Event(),
            cast(MetricsEndpoint, health),
        )
    )
    assert worker.calls == 3
    assert health.seen == ["'registry'", "containerd is restarting", None]
    assert "reconciling with the runtime failed; retrying" in caplog.text
    assert "KeyError" in caplog.text  # the traceback, for the bug report
