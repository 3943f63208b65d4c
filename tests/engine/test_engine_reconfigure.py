"""Configurations that cannot place a running container, at a restart or a reconfiguration:
it stays tracked and keeps CPUs; shared containers move out before exclusive ones move in; a
reconfiguration whose state cannot be written changes nothing. The runtime is a stand-in
(tests/engine/standins.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from enforcer.configuration import parse_config
from enforcer.engine.registry import StateWriteFailed
from enforcer.refusal import Refusal
from enforcer.topology import CPUSet
from tests.engine.standins import (
    CONFIG,
    FailingStore,
    StandInRuntime,
    admit,
    create,
    enforcer,
)
from tests.support.pods import guaranteed


def test_a_running_container_that_no_longer_fits_moves_to_the_shared_pool(
    tmp_path: Path,
) -> None:
    runtime = StandInRuntime()
    e = enforcer(tmp_path, runtime)
    cid = create(e, runtime, "holder", guaranteed("3"))  # CPUs 1-3: all but the reserved one
    # Restarted with CPU 1 reserved as well: three exclusive CPUs no longer fit.
    config = parse_config({"policy": {"name": "static", "reservedCPUs": "0-1"}})
    again = enforcer(tmp_path, runtime, config, reconciled=False)
    again.restore_saved()
    again.reconcile()
    entry = again.registry.by_container(cid)
    assert entry is not None  # still tracked
    assert again.policy.placement(entry.key).kind == "shared"
    assert runtime.cpus[cid] == "0-3"  # moved before any other container is placed


TOPOLOGY_AWARE = parse_config({"policy": {"name": "topology-aware", "reservedCPUs": "0"}})


def test_a_running_container_the_new_configuration_cannot_place_keeps_its_cpus(
    tmp_path: Path,
) -> None:
    runtime = StandInRuntime()
    e = enforcer(tmp_path, runtime, TOPOLOGY_AWARE)
    cid = create(e, runtime, "holder", guaranteed("2"))
    held = CPUSet.parse(runtime.cpus[cid])
    # Restarted with only CPUs 0-1 available: two exclusive CPUs no longer fit, nor do two
    # CPUs' worth of requests on the one shared CPU.
    config = parse_config(
        {"policy": {"name": "topology-aware", "reservedCPUs": "0", "availableCPUs": "0-1"}}
    )
    again = enforcer(tmp_path, runtime, config, reconciled=False)
    again.restore_saved()
    again.reconcile()
    entry = again.registry.by_container(cid)
    assert entry is not None and entry.unplaced is not None  # tracked, and said why
    assert again.policy.placement(entry.key).kind == "held"
    row = next(v for v in again.views() if v.container_id == cid)
    assert row.problem is not None and "cannot place" in row.problem
    assert again.policy.taken >= held  # nobody else gets its CPUs
    assert runtime.cpus[cid] == str(held)  # left where it runs
    with pytest.raises(Refusal):
        admit(again, "newcomer", guaranteed("1"))
    assert again.metrics.held._value.get() == 1
    # Once it ends, its CPUs are free again.
    del runtime.containers[cid]
    again.observed([], complete=True, asked_at=again.sequence)
    assert not again.policy.taken and again.registry.by_container(cid) is None


def test_reconfiguration_moves_shared_containers_out_before_exclusive_ones_move_in(
    tmp_path: Path,
) -> None:
    runtime = StandInRuntime()
    e = enforcer(tmp_path, runtime)
    holder = create(e, runtime, "holder", guaranteed("2"))
    sharer = create(e, runtime, "sharer")
    held = runtime.cpus[holder]
    runtime.updates.clear()
    # The held CPUs become reserved: the holder must move onto CPUs the sharer is on now.
    e.reconfigure(parse_config({"policy": {"name": "static", "reservedCPUs": held}}))
    order = [cid for cid, _ in runtime.updates]
    assert order == [sharer, holder]
    assert not CPUSet.parse(runtime.cpus[holder]) & CPUSet.parse(runtime.cpus[sharer])


def test_a_reconfiguration_whose_state_cannot_be_written_changes_nothing(
    tmp_path: Path,
) -> None:
    runtime = StandInRuntime()
    e = enforcer(tmp_path, runtime)
    holder = create(e, runtime, "holder", guaranteed("2"))
    before = runtime.cpus[holder]
    store = e.registry.store
    assert isinstance(store, FailingStore)
    store.fail = OSError(5, "Input/output error")
    with pytest.raises(StateWriteFailed):
        e.reconfigure(parse_config({"policy": {"name": "static", "reservedCPUs": before}}))
    assert e.config is CONFIG and runtime.cpus[holder] == before
    assert str(e.policy.placement(e.registry.by_container(holder).key).exclusive) == before  # type: ignore[union-attr]
