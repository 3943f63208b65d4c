"""The engine changes on its worker's thread only: a call that would change it from another
thread while the worker holds it fails at once, naming the call and the threads, and changes
nothing; the reads a transport makes on its event loop (`gone`, `unknown`, `views`) still work."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import pytest

from enforcer.engine.kubelet_record import KubeletRecord
from enforcer.engine.thread import OffWorker
from enforcer.worker import EngineWorker
from tests.engine.standins import StandInRuntime, admit, create, create_of, enforcer


def test_a_change_off_the_worker_fails_clearly_and_changes_nothing(tmp_path: Path) -> None:
    runtime = StandInRuntime()
    e = enforcer(tmp_path, runtime)
    worker = EngineWorker(e)

    async def scenario() -> None:
        cid = await worker.run(create, e, runtime, "first")
        before = dict(e.registry.entries)
        state = (tmp_path / "state").read_bytes() if (tmp_path / "state").is_file() else None
        with pytest.raises(OffWorker) as refused:
            admit(e, "second")  # Enforcer.create, on the event loop's thread
        said = str(refused.value)
        assert "Enforcer.create" in said
        assert "enforcer" in said  # the worker's thread, by name
        assert threading.current_thread().name in said
        with pytest.raises(OffWorker, match=r"Enforcer\.container_gone"):
            e.container_gone(cid, "stopped")
        with pytest.raises(OffWorker, match=r"Enforcer\.reconcile"):
            e.reconcile()
        assert dict(e.registry.entries) == before  # nothing admitted, nothing released
        if state is not None:
            assert (tmp_path / "state").read_bytes() == state
        # The reads the relay makes on its event loop are allowed there.
        listing = list(runtime.containers.values())
        assert e.gone(listing, complete=True, asked_at=e.sequence) == []
        assert not e.unknown(listing)
        assert [v.pod for v in e.views()] == ["first"]
        # The same call on the worker goes through.
        key, _ = await worker.run(admit, e, "second")
        assert key in e.registry

    try:
        asyncio.run(scenario())
    finally:
        worker.close()


def test_the_engine_is_free_again_once_its_worker_stopped(tmp_path: Path) -> None:
    """A stop after the worker closed (or a start-up before it ran) calls the engine directly."""
    runtime = StandInRuntime()
    e = enforcer(tmp_path, runtime)
    worker = EngineWorker(e)

    async def on_the_worker() -> str:
        return await worker.run(lambda: admit(e, "first")[0])

    key = asyncio.run(on_the_worker())
    worker.close()
    e.persist()  # no OffWorker: the worker's thread has ended
    assert key in e.registry
    key2, _ = e.create(create_of("second"), sandbox_id="sandbox", resources=KubeletRecord())
    assert key2 in e.registry


def test_every_call_that_changes_the_engine_is_checked() -> None:
    """The façade's methods that change the engine carry the check; only the reads do not."""
    from enforcer.engine import Enforcer

    reads = {"gone", "unknown", "views"}
    methods = {
        name
        for name, value in vars(Enforcer).items()
        if callable(value) and not name.startswith("_")
    }
    unchecked = {name for name in methods if not hasattr(getattr(Enforcer, name), "__wrapped__")}
    assert unchecked == reads
    assert {"create", "created", "observed", "reconcile", "repin", "maintain"} <= methods
