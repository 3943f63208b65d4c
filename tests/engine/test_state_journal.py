"""The state journal: a CreateContainer's decision written as one short record before the
runtime hears of the container, made durable (fdatasync) while the runtime creates it, and
read back by the next process on top of the state file.

What an operator relies on: an enforcer killed at any moment after a decision restarts with
that decision (the CPUs stay taken); a record cut off by a crash is not applied and the rest
is; nothing is applied twice; the journal never grows without bound; a journal that cannot be
read stops decisions as an unreadable state file does."""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

import pytest

from enforcer.commands.status import status
from enforcer.configuration import parse_config
from enforcer.engine import Enforcer, LiveContainer
from enforcer.engine.kubelet_record import KubeletRecord
from enforcer.engine.registry import StateWriteFailed
from enforcer.refusal import Reason
from enforcer.state import StateStore
from enforcer.state import journal as journal_module
from enforcer.state import store as store_module
from enforcer.state.encoding import encode_state
from enforcer.state.store import JOURNAL_FILE
from enforcer.topology import Topology
from resource_contract.config import Config
from tests.engine.restore_support import Runtime, create_of
from tests.support.pods import guaranteed

MACHINE = Topology.synthetic(sockets=1, cores_per_node=4, threads_per_core=1)  # CPUs 0-3
STATIC = parse_config({"policy": {"name": "static", "reservedCPUs": "0"}})
TOPOLOGY_AWARE = parse_config({"policy": {"name": "topology-aware", "reservedCPUs": "0"}})
BALLOONS = parse_config(
    {
        "policy": {
            "name": "balloons",
            "reservedCPUs": "0",
            "balloonTypes": [{"name": "work", "minCPUs": 1, "maxCPUs": 2}],
        }
    }
)


def started(folder: Path, runtime: Runtime, config: Config = STATIC) -> Enforcer:
    """An enforcer as after its start: state restored, runtime read (a durable write)."""
    store = StateStore(folder)
    store.ensure_dir()
    e = Enforcer(topology=MACHINE, config=config, store=store, runtime=runtime)
    e.restore_saved()
    e.reconcile()
    return e


def decide(e: Enforcer, runtime: Runtime, name: str, cpus: str | None = None) -> str:
    """A CreateContainer as the relay makes it: decided, journaled, then created and synced."""
    resources = guaranteed(cpus) if cpus else None
    key, _ = e.create(
        create_of(name, resources),
        sandbox_id=f"sandbox-{name}",
        resources=KubeletRecord(),
        sync_later=True,
    )
    cid = f"cid-{name}"
    runtime.containers[cid] = LiveContainer(
        cid, f"sandbox-{name}", key, running=False, exited=False
    )
    assert e.sync_state() is None
    e.created(key, cid)
    return key


def decisions(e: Enforcer) -> dict[str, str]:
    return {key: str(a.exclusive) for key, a in e.policy.admitted.items()}


@pytest.mark.parametrize(
    "config", [STATIC, TOPOLOGY_AWARE, BALLOONS], ids=["static", "topology-aware", "balloons"]
)
def test_a_killed_enforcer_restarts_with_every_journaled_decision(
    tmp_path: Path, config: Config
) -> None:
    folder = tmp_path / "state"
    runtime = Runtime()
    first = started(folder, runtime, config)
    decide(first, runtime, "a", "1")
    decide(first, runtime, "b")
    decide(first, runtime, "c", "1")
    before = decisions(first)
    state = first.registry.to_state()
    assert (folder / JOURNAL_FILE).stat().st_size > 0  # the decisions are records...
    # ...and the state file was not rewritten for them (the killed process never flushed).
    replayed = StateStore(folder).load(move_aside=False)
    assert replayed is not None
    assert replayed["policy"] == state["policy"]  # the policy's whole book, as in memory
    again = started(folder, runtime, config)
    assert decisions(again) == before
    assert {e.container_id for e in again.registry.entries.values()} == set(runtime.containers)
    if config is BALLOONS:
        assert again.policy.state_header() == first.policy.state_header()


def test_a_decision_is_in_the_journal_before_the_runtime_hears_of_it(tmp_path: Path) -> None:
    """Killed between the decision and the runtime's answer: the next process holds the CPU
    (phase unknown, until the runtime says), so nobody else gets it meanwhile."""
    folder = tmp_path / "state"
    runtime = Runtime()
    first = started(folder, runtime)
    key, pinning = first.create(
        create_of("g", guaranteed("1")),
        sandbox_id="sandbox-g",
        resources=KubeletRecord(),
        sync_later=True,
    )
    # Killed here: no sync, no answer. The container exists in the runtime all the same.
    runtime.containers["cid-g"] = LiveContainer("cid-g", "sandbox-g", key, True, False)
    again = started(folder, runtime)
    assert str(again.policy.admitted[key].exclusive) == pinning.cpus
    assert again.registry.entries[key].container_id == "cid-g"
    with pytest.raises(Exception, match=r"2 free \(2-3\)") as refused:  # CPU 1 stays taken
        again.create(
            create_of("h", guaranteed("3")), sandbox_id="sandbox-h", resources=KubeletRecord()
        )
    assert getattr(refused.value, "reason", None) is Reason.NO_ROOM


def test_a_record_cut_off_by_a_crash_is_not_applied_and_the_others_are(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    folder = tmp_path / "state"
    runtime = Runtime()
    first = started(folder, runtime)
    a = decide(first, runtime, "a", "1")
    b = decide(first, runtime, "b")
    journal = folder / JOURNAL_FILE
    whole = journal.read_bytes()
    last = whole[:-1].rfind(b"\n") + 1  # where b's record starts
    journal.write_bytes(whole[: last + (len(whole) - last) // 2])  # b's record half written
    del runtime.containers["cid-b"]  # its creation never reached the runtime
    with caplog.at_level(logging.WARNING):
        again = started(folder, runtime)
    assert a in again.policy.admitted and b not in again.policy.admitted
    assert any(
        str(journal) in r.getMessage() and "not applied" in r.getMessage() for r in caplog.records
    )


def test_reading_stops_at_a_damaged_record() -> None:
    lines = [journal_module.encode({"containers": {"k": None}}, seq) for seq in (1, 2, 3)]
    damaged = lines[1].replace(b'"k"', b'"x"')  # same length, checksum no longer matches
    read = journal_module.decode(lines[0] + damaged + lines[2])
    assert [r["seq"] for r in read.records] == [1]
    assert read.rest == len(damaged) + len(lines[2])
    assert "checksum" in read.why
    out_of_order = journal_module.decode(lines[1] + lines[0])
    assert [r["seq"] for r in out_of_order.records] == [2] and "order" in out_of_order.why


def test_records_the_state_file_holds_are_not_applied_again(tmp_path: Path) -> None:
    """A lazy (not durable) write of the state file holds the records but leaves the journal
    as it is: a record is never applied twice, a container removed since never comes back."""
    folder = tmp_path / "state"
    runtime = Runtime()
    first = started(folder, runtime)
    a = decide(first, runtime, "a", "1")
    first.flush()  # the state file now holds a's record too; the journal still has it
    assert (folder / JOURNAL_FILE).stat().st_size > 0
    del runtime.containers["cid-a"]
    first.container_gone("cid-a", "removed")  # a durable write: the journal is emptied
    assert (folder / JOURNAL_FILE).stat().st_size == 0
    again = started(folder, runtime)
    assert a not in again.policy.admitted


def test_kubelets_retry_of_a_cut_off_creation_replaces_its_record(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The same container decided twice (its creation cut off, then kubelet's retry of the same
    attempt): the later record replaces the earlier decision. Once, both were kept, and the
    next start called its own state corrupt, kept the older decision and moved the file aside
    (found by tests/engine/test_state_damage_properties.py)."""
    folder = tmp_path / "state"
    runtime = Runtime()
    first = started(folder, runtime)
    create = create_of("g", guaranteed("1"))
    key, _ = first.create(
        create, sandbox_id="sandbox-g", resources=KubeletRecord(), sync_later=True
    )
    assert first.sync_state() is None
    first.create_failed(key, uncertain=True, details="context deadline exceeded")
    retried, pinning = first.create(
        create, sandbox_id="sandbox-g", resources=KubeletRecord(), sync_later=True
    )
    assert retried == key and first.sync_state() is None
    runtime.containers["cid-g"] = LiveContainer("cid-g", "sandbox-g", key, True, False)
    # Killed here: both decisions are journal records.
    with caplog.at_level(logging.WARNING):
        again = started(folder, runtime)
    assert not [r for r in caplog.records if "corrupt" in r.getMessage()]
    assert not list(folder.glob("state.json.corrupt-*"))
    assert list(again.policy.admitted) == [key]
    assert str(again.policy.admitted[key].exclusive) == pinning.cpus


@pytest.mark.parametrize("key", [{}, ["a"]], ids=["object", "array"])
def test_records_apply_over_a_container_entry_whose_key_is_damaged(
    tmp_path: Path, key: object, caplog: pytest.LogCaptureFixture, capsys: pytest.CaptureFixture
) -> None:
    """A container entry whose key is not a string is left for the state's checks, which name
    it; the records still apply. Once a TypeError (unhashable): no start, `status` crashed."""
    folder = tmp_path / "state"
    runtime = Runtime()
    first = started(folder, runtime)
    a = decide(first, runtime, "a", "1")
    first.flush()  # the state file holds a; the journal still has its record
    b = decide(first, runtime, "b", "1")
    path = folder / "state.json"
    state = json.loads(path.read_text())
    state["containers"][0]["key"] = key
    path.write_bytes(encode_state(state))  # a writer's bug: the checksum matches
    assert status(str(folder)) == 0
    assert "container entry 1: " in capsys.readouterr().err
    with caplog.at_level(logging.ERROR):
        again = started(folder, runtime)
    (line,) = [r.getMessage() for r in caplog.records if "is corrupt" in r.getMessage()]
    assert "container entry 1: key is" in line
    assert b in again.policy.admitted and a not in again.policy.admitted


def test_a_long_journal_is_folded_into_the_state_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(store_module, "JOURNAL_FOLD_BYTES", 2000)
    folder = tmp_path / "state"
    runtime = Runtime()
    e = started(folder, runtime)
    for i in range(6):
        decide(e, runtime, f"s{i}")
    journal = folder / JOURNAL_FILE
    assert journal.stat().st_size > 2000
    e.flush()
    assert journal.stat().st_size == 0
    assert decisions(started(folder, runtime)) == decisions(e)


def test_a_full_disk_leaves_no_half_record_and_refuses_the_container(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = tmp_path / "state"
    runtime = Runtime()
    e = started(folder, runtime)
    decide(e, runtime, "a")
    size = (folder / JOURNAL_FILE).stat().st_size
    real_write = os.write

    def short(fd: int, data: bytes) -> int:  # the disk fills up in the middle of the record
        return real_write(fd, data[: len(data) // 2])

    monkeypatch.setattr(store_module.os, "write", short)
    with pytest.raises(Exception) as refused:
        e.create(
            create_of("b", guaranteed("1")),
            sandbox_id="sandbox-b",
            resources=KubeletRecord(),
            sync_later=True,
        )
    monkeypatch.undo()
    assert getattr(refused.value, "reason", None) is Reason.UNAVAILABLE
    assert str(folder / JOURNAL_FILE) in str(refused.value)
    assert (folder / JOURNAL_FILE).stat().st_size == size  # nothing of it left
    assert len(e.policy.admitted) == 1  # rolled back


def test_a_failed_fsync_keeps_the_decision_and_refuses_new_ones_until_it_works(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = tmp_path / "state"
    runtime = Runtime()
    e = started(folder, runtime)
    key, _ = e.create(
        create_of("a", guaranteed("1")),
        sandbox_id="sandbox-a",
        resources=KubeletRecord(),
        sync_later=True,
    )

    def failing(fd: int) -> None:
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(store_module.os, "fdatasync", failing)
    monkeypatch.setattr(store_module.os, "fsync", failing)  # the disk fails every sync
    why = e.sync_state()
    assert why is not None and "Input/output error" in why
    assert key in e.policy.admitted  # the runtime may have made the container: it keeps its CPU
    with pytest.raises(Exception, match="cannot be written") as refused:
        e.create(create_of("b"), sandbox_id="sandbox-b", resources=KubeletRecord())
    assert getattr(refused.value, "reason", None) is Reason.UNAVAILABLE
    monkeypatch.undo()
    # The next creation asks the disk again (a durable write of the whole state) and is placed.
    e.create(create_of("b"), sandbox_id="sandbox-b", resources=KubeletRecord())
    assert e.registry.store is not None and e.registry.store.problem is None


def test_a_failed_fsync_is_not_forgotten_by_a_later_one_that_succeeds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Linux reports a write-back error once and marks the pages clean: the next fdatasync on
    # the same file returns 0 though the earlier records may never reach the disk.
    folder = tmp_path / "state"
    runtime = Runtime()
    e = started(folder, runtime)
    a, _ = e.create(
        create_of("a", guaranteed("1")),
        sandbox_id="sandbox-a",
        resources=KubeletRecord(),
        sync_later=True,
    )
    b, _ = e.create(
        create_of("b", guaranteed("1")),
        sandbox_id="sandbox-b",
        resources=KubeletRecord(),
        sync_later=True,
    )
    calls: list[int] = []

    def once_failing(fd: int) -> None:
        calls.append(fd)
        if len(calls) == 1:
            raise OSError(5, "Input/output error")

    monkeypatch.setattr(store_module.os, "fdatasync", once_failing)
    assert e.sync_state() is not None  # A's
    why = e.sync_state()  # B's: the kernel would say 0 now; the store must not believe it
    assert why is not None and "earlier fsync failed" in why
    assert e.registry.store is not None and e.registry.store.problem is not None

    def failing(fd: int) -> None:
        raise OSError(5, "Input/output error")

    with monkeypatch.context() as disk_still_failing:
        disk_still_failing.setattr(store_module.os, "fsync", failing)
        with pytest.raises(Exception, match="cannot be written") as refused:
            e.create(create_of("c"), sandbox_id="sandbox-c", resources=KubeletRecord())
    assert getattr(refused.value, "reason", None) is Reason.UNAVAILABLE
    fsynced: list[int] = []
    real_fsync = store_module.os.fsync

    def counting(fd: int) -> None:
        fsynced.append(fd)
        real_fsync(fd)

    monkeypatch.setattr(store_module.os, "fsync", counting)
    e.flush()  # the periodic write: the whole state file, fsynced
    assert fsynced, "the state file was not written durably after the failed fsync"
    assert e.registry.store.problem is None
    saved = StateStore(folder).load()
    assert saved is not None
    keys = {c["key"] for c in saved["containers"]}
    assert {a, b} <= keys
    e.create(create_of("c"), sandbox_id="sandbox-c", resources=KubeletRecord())


def test_a_journal_that_cannot_be_read_stops_decisions(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = tmp_path / "state"
    runtime = Runtime()
    decide(started(folder, runtime), runtime, "a", "1")
    real = store_module.read_file

    def denied(path: Path) -> bytes:  # root reads anything: the refusal is played
        if Path(path).name == JOURNAL_FILE:
            raise PermissionError(13, "Permission denied", str(path))
        return real(path)

    monkeypatch.setattr(store_module, "read_file", denied)
    store = StateStore(folder)
    e = Enforcer(topology=MACHINE, config=STATIC, store=store, runtime=runtime)
    e.restore_saved()
    assert store.problem is not None and str(folder / JOURNAL_FILE) in store.problem
    e.reconciled = True
    with pytest.raises(Exception, match="cannot be read") as refused:
        e.create(create_of("b"), sandbox_id="sandbox-b", resources=KubeletRecord())
    assert getattr(refused.value, "reason", None) is Reason.UNAVAILABLE
    with pytest.raises(StateWriteFailed):
        e.persist()  # never written over


def test_a_link_planted_at_the_journal_is_replaced_never_written_through(tmp_path: Path) -> None:
    folder = tmp_path / "state"
    folder.mkdir(mode=0o700)
    victim = tmp_path / "victim"
    victim.write_text("keep me\n")
    (folder / JOURNAL_FILE).symlink_to(victim)
    runtime = Runtime()
    e = started(folder, runtime)  # no state file yet: the link is not read
    decide(e, runtime, "a", "1")
    assert victim.read_text() == "keep me\n"
    assert not (folder / JOURNAL_FILE).is_symlink()
    assert oct((folder / JOURNAL_FILE).stat().st_mode & 0o777) == "0o600"
