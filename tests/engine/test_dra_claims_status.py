"""Claimed CPUs in what an operator reads: `resource-enforcer status` over the state folder a
real engine wrote (the claim held, its container on its CPUs, the CPU map naming the claim),
the `resource_enforcer_cpus` gauge and the use by NUMA node that the dashboard plots."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

from prometheus_client import generate_latest

from enforcer.configuration import parse_config
from enforcer.engine import Enforcer
from enforcer.engine.claimed import claim_request
from enforcer.engine.kubelet_record import KubeletRecord
from enforcer.topology import CPUSet
from enforcer.usage import measure
from tests.engine.standins import StandInRuntime, create, create_of, enforcer

EXE = Path(sys.executable).parent / "resource-enforcer"


def claimed_node(tmp_path: Path) -> tuple[Enforcer, StandInRuntime]:
    """Topology-aware on the 4-CPU test machine (CPU 0 reserved): a shared container, a claim
    holding CPUs 2-3 and a container of the claim."""
    runtime = StandInRuntime()
    config = parse_config({"policy": {"name": "topology-aware", "reservedCPUs": "0"}})
    e = enforcer(tmp_path, runtime, config)
    create(e, runtime, "shared")
    e.hold_claim(claim_request("u1", "ml", "gpu-job", cpu_class=None), CPUSet.parse("2-3"))
    key, pinning = e.create(
        replace(create_of("worker"), dra_claims=("u1",)), sandbox_id="s", resources=KubeletRecord()
    )
    e.created(key, "cid-worker")
    runtime.add("cid-worker", key)
    runtime.cpus["cid-worker"] = pinning.cpus
    e.started("cid-worker")
    return e, runtime


def status(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(EXE), "status", "--state-dir", str(tmp_path / "state"), *args],
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_status_shows_the_claim_its_container_and_its_cpus(tmp_path: Path) -> None:
    claimed_node(tmp_path)
    done = status(tmp_path, "--output", "json")
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    assert (doc["exclusiveCPUs"], doc["claimedCPUs"]) == ("", "2-3")
    assert doc["claims"] == [
        {
            "namespace": "ml",
            "name": "gpu-job",
            "uid": "u1",
            "cpus": "2-3",
            "mems": "0",
            "rdtClass": None,
            "blockioClass": None,
            "cpuClass": None,
            "containers": ["e2e/worker/app"],
        }
    ]
    rows = {(r["pod"], r["container"]): r for r in doc["containers"]}
    worker = rows[("worker", "app")]
    assert (worker["kind"], worker["cpus"], worker["mems"]) == ("claimed", "2-3", "0")
    assert rows[("gpu-job", "u1")]["kind"] == "claim"
    assert rows[("shared", "app")]["cpus"] == "1"  # off the claimed CPUs
    cells = {c["cpu"]: (c["use"], c["holder"]) for c in doc["cpus"]}
    assert cells[2] == cells[3] == ("claimed", "claim:ml/gpu-job")
    assert cells[1] == ("shared", None)
    table = status(tmp_path)
    assert table.returncode == 0, table.stderr
    assert "exclusive none; claimed (DRA) 2-3" in table.stdout
    assert "cpu2=claim:ml/gpu-job" in table.stdout and "cpu3=claim:ml/gpu-job" in table.stdout


def test_the_gauges_count_claimed_cpus_apart_from_exclusive_ones(tmp_path: Path) -> None:
    e, runtime = claimed_node(tmp_path)
    create(e, runtime, "pinned", {"limits": {"cpu": "1", "memory": "64Mi"}})
    scrape = generate_latest(e.metrics.registry).decode()
    assert 'resource_enforcer_cpus{use="claimed"} 2.0' in scrape
    assert 'resource_enforcer_cpus{use="exclusive"} 1.0' in scrape
    (node,) = measure(e.topology, e.policy).nodes
    assert (node.cpu.claimed, node.cpu.exclusive) == (2, 1)
    # Released: the claimed CPUs are counted nowhere but shared again.
    assert e.release_claim("u1")
    scrape = generate_latest(e.metrics.registry).decode()
    assert 'resource_enforcer_cpus{use="claimed"} 0.0' in scrape
