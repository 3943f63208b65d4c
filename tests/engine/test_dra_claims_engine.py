"""Prepared DRA claims in the engine: a claim's CPUs leave the shared pool for every other
container and come back when it is released; a container of the claim runs on exactly them
with their memory nodes; our own exclusive CPUs and claimed CPUs never overlap; the claim is
in the state file and held again, before any container, after a restart, in every policy."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from enforcer.configuration import parse_config
from enforcer.engine import Enforcer
from enforcer.engine.claimed import claim_request, claims, holders
from enforcer.engine.kubelet_record import KubeletRecord
from enforcer.refusal import Reason, Refusal
from enforcer.topology import CPUSet
from tests.engine.standins import (
    StandInRuntime,
    admit,
    create,
    create_of,
    enforcer,
)
from tests.support.pods import guaranteed

POLICIES = [
    {"name": "static", "reservedCPUs": "0"},
    {"name": "topology-aware", "reservedCPUs": "0"},
    {"name": "balloons", "reservedCPUs": "0"},
]


def hold(e: Enforcer, uid: str, cpus: str, **classes: str) -> None:
    e.hold_claim(claim_request(uid, "ns", f"claim-{uid}", **classes), CPUSet.parse(cpus))


def claimed_create(name: str, *uids: str):  # type: ignore[no-untyped-def]
    return replace(create_of(name), dra_claims=uids)


@pytest.mark.parametrize("policy", POLICIES, ids=lambda p: p["name"])
def test_claimed_cpus_leave_the_shared_pool_and_come_back(tmp_path: Path, policy: dict) -> None:
    runtime = StandInRuntime()
    e = enforcer(tmp_path, runtime, parse_config({"policy": policy}))
    shared = create(e, runtime, "shared")
    before = CPUSet.parse(runtime.cpus[shared])
    assert CPUSet.of(2) <= before
    hold(e, "u1", "2")
    assert 2 not in CPUSet.parse(runtime.cpus[shared])  # re-pinned off the claimed CPU
    # A container of the claim: exactly the claimed CPU, its memory node.
    key, pinning = e.create(
        claimed_create("worker", "u1"), sandbox_id="s", resources=KubeletRecord()
    )
    assert (pinning.cpus, pinning.mems) == ("2", "0")
    e.created(key, "cid-worker")
    runtime.add("cid-worker", key)
    assert e.release_claim("u1")
    assert CPUSet.parse(runtime.cpus[shared]) == before
    assert not e.release_claim("u1")  # unprepare is idempotent


def test_exclusive_cpus_and_claims_never_overlap(tmp_path: Path) -> None:
    runtime = StandInRuntime()
    e = enforcer(tmp_path, runtime)  # static, reserved 0, CPUs 1-3
    hold(e, "u1", "1-2")
    cid = create(e, runtime, "exclusive", guaranteed("1"))
    assert runtime.cpus[cid] == "3"
    with pytest.raises(Refusal) as refused:
        admit(e, "another", guaranteed("1"))
    assert refused.value.reason is Reason.NO_ROOM
    assert holders(e.policy)[1] == "claim ns/claim-u1"
    with pytest.raises(ValueError, match=r"claim ns/claim-u2: CPUs 3 are held by container"):
        hold(e, "u2", "3")
    assert set(claims(e.policy)) == {"u1"}  # the refused hold left nothing behind


def test_no_claim_is_held_before_the_runtime_was_read_after_a_start(tmp_path: Path) -> None:
    e = enforcer(tmp_path, StandInRuntime(), reconciled=False)
    with pytest.raises(Refusal, match="not yet read the runtime's containers") as refused:
        hold(e, "u1", "1")
    assert refused.value.reason is Reason.UNAVAILABLE and claims(e.policy) == {}


def test_a_container_naming_a_claim_not_prepared_here_is_refused(tmp_path: Path) -> None:
    e = enforcer(tmp_path, StandInRuntime())
    with pytest.raises(Refusal, match="DRA claim nope is not prepared on this node") as refused:
        e.create(claimed_create("worker", "nope"), sandbox_id="s", resources=KubeletRecord())
    assert refused.value.reason is Reason.UNAVAILABLE


@pytest.mark.parametrize("policy", POLICIES, ids=lambda p: p["name"])
def test_a_restart_holds_every_claim_again_before_any_container(
    tmp_path: Path, policy: dict
) -> None:
    config = parse_config({"policy": policy})
    runtime = StandInRuntime()
    e = enforcer(tmp_path, runtime, config)
    hold(e, "u1", "3")
    key, _ = e.create(claimed_create("worker", "u1"), sandbox_id="s", resources=KubeletRecord())
    e.created(key, "cid-worker")
    runtime.add("cid-worker", key)
    runtime.cpus["cid-worker"] = "3"
    e.started("cid-worker")
    shared = create(e, runtime, "shared")
    # A new process over the same state folder (kill -9: nothing more was written).
    again = enforcer(tmp_path, runtime, config, reconciled=False)
    again.restore_saved()
    assert {u: a.exclusive for u, a in claims(again.policy).items()} == {"u1": CPUSet.of(3)}
    again.reconcile()
    assert runtime.cpus["cid-worker"] == "3"
    assert 3 not in CPUSet.parse(runtime.cpus[shared])
    # A reconfiguration keeps it too.
    again.reconfigure(parse_config({"policy": {**policy, "reservedCPUs": "0"}}))
    assert set(claims(again.policy)) == {"u1"}
