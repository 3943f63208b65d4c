"""The DRA driver follows the hardware: every publishing round reads the CPUs online again from
sysfs (here a fake sysfs root whose `devices/system/cpu/online` the test rewrites, as the
kernel does on hot-unplug), and the node's ResourceSlices (in the test API server) change with
them; a claim's CPUs are never offered as free, whatever goes offline. The enforcer is a real
engine over the engine tests' stand-in runtime: static policy, CPUs 0-3, CPU 0 reserved."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from enforcer.app.dra_start import DRAHandle
from enforcer.cluster.client import make_api_client
from enforcer.dra.claims import ClaimError
from enforcer.dra.driver import DRADriver
from enforcer.dra.kubelet_plugin import ClaimRef
from enforcer.dra.slices import ClusterDRA
from enforcer.engine import Enforcer
from enforcer.engine.claimed import claims
from enforcer.options import RunOptions
from enforcer.topology import CPUSet
from enforcer.worker import EngineWorker
from resource_contract.config import Config, parse_config
from tests.dra.test_dra_slices import SLICES
from tests.engine.standins import StandInRuntime, create, enforcer
from tests.support.fake_apiserver import FakeAPIServer
from tests.support.pods import guaranteed

DRIVER = "cpu.resource-enforcer.dev"


def claim(name: str, device: str, consumed: str | None = None) -> dict[str, Any]:
    result: dict[str, Any] = {"request": "cpus", "driver": DRIVER, "pool": "node-a"}
    result["device"] = device
    if consumed is not None:
        result["consumedCapacity"] = {"cpu": consumed}
    return {
        "metadata": {"namespace": "ns", "name": name, "uid": f"uid-{name}"},
        "status": {"allocation": {"devices": {"results": [result]}}},
    }


@dataclass
class Bed:
    enforcer: Enforcer
    handle: DRAHandle
    driver: DRADriver
    server: FakeAPIServer
    sysfs: Path
    api: dict[str, dict[str, Any]]
    worker: EngineWorker

    def reconfigure(self, config: Config) -> list[str]:
        """A new configuration, applied on the engine's worker as the daemon applies it."""
        return asyncio.run(self.worker.run(self.enforcer.reconfigure, config))

    def set_online(self, cpus: str) -> None:
        (self.sysfs / "devices" / "system" / "cpu" / "online").write_text(cpus + "\n")

    def publish(self) -> bool:
        return asyncio.run(self.handle.publish())

    def slices(self) -> list[dict[str, Any]]:
        return list(self.server.custom[("resource.k8s.io", "resourceslices")].values())

    def devices(self) -> list[dict[str, Any]]:
        return [d for s in self.slices() for d in s["spec"]["devices"]]

    def names(self) -> list[str]:
        return [d["name"] for d in self.devices()]

    def prepare(self, name: str) -> None:
        self.driver.prepare(ClaimRef(namespace="ns", uid=f"uid-{name}", name=name))


def make_bed(tmp_path: Path, mode: str, claim_docs: list[dict[str, Any]]) -> Iterator[Bed]:
    config = parse_config(
        {"policy": {"name": "static", "reservedCPUs": "0"}, "dra": {"enabled": True, "mode": mode}}
    )
    e = enforcer(tmp_path, StandInRuntime(), config)
    sysfs = tmp_path / "sys"
    (sysfs / "devices" / "system" / "cpu").mkdir(parents=True)
    api = {c["metadata"]["name"]: c for c in claim_docs}
    driver = DRADriver(
        e,
        node_name="node-a",
        read_claim=lambda ns, name: api[name],
        on_worker=lambda fn: fn(),
        cdi_dir=tmp_path / "cdi",
    )
    worker = EngineWorker(e)
    with FakeAPIServer() as server:
        server.install_crd(SLICES)
        server.put_node("node-a")
        kubeconfig = server.kubeconfig(tmp_path / "kubeconfig")
        handle = DRAHandle(RunOptions(sysfs_root=str(sysfs)), e, worker)
        handle.driver = driver
        handle.cluster = ClusterDRA(lambda: make_api_client(kubeconfig), "node-a")
        bed = Bed(e, handle, driver, server, sysfs, api, worker)
        bed.set_online("0-3")
        yield bed
    worker.close()


@pytest.fixture
def individual(tmp_path: Path) -> Iterator[Bed]:
    yield from make_bed(tmp_path, "individual", [claim("one", "cpu-2"), claim("two", "cpu-1")])


@pytest.fixture
def grouped(tmp_path: Path) -> Iterator[Bed]:
    yield from make_bed(tmp_path, "grouped", [claim("one", "numa-0", consumed="1")])


def test_the_slices_follow_the_cpus_online(
    individual: Bed, caplog: pytest.LogCaptureFixture
) -> None:
    bed = individual
    bed.prepare("one")  # CPU 2, the claim's
    assert bed.publish()
    assert bed.names() == ["cpu-1", "cpu-2", "cpu-3"]
    (first,) = bed.slices()
    generation = first["spec"]["pool"]["generation"]

    bed.set_online("0-2")  # CPU 3 unplugged: withdrawn, a new generation of the pool
    assert bed.publish()
    assert bed.names() == ["cpu-1", "cpu-2"]
    (second,) = bed.slices()
    assert second["spec"]["pool"]["generation"] > generation

    bed.set_online("0,2-3")  # CPU 1 gone, 3 back: a claim allocated CPU 1 before is refused
    assert bed.publish()
    assert bed.names() == ["cpu-2", "cpu-3"]
    with pytest.raises(ClaimError, match="CPU 1 is not offered on this node"):
        bed.prepare("two")
    assert "uid-two" not in claims(bed.enforcer.policy)

    bed.set_online("0-1,3")  # the claimed CPU offline: it stays the claim's device
    assert bed.publish()
    assert bed.names() == ["cpu-1", "cpu-2", "cpu-3"]

    bed.set_online("0-4")  # a CPU the enforcer never knew: not offered, said why
    with caplog.at_level(logging.WARNING, logger="enforcer"):
        assert not bed.publish()  # nothing else changed: nothing written
    assert bed.names() == ["cpu-1", "cpu-2", "cpu-3"]
    assert "CPUs 4 came online after the enforcer started" in caplog.text

    # The reserved CPUs changed by a new configuration: published again at the next round.
    config = parse_config(
        {"policy": {"name": "static", "reservedCPUs": "0-1"}, "dra": {"enabled": True}}
    )
    assert bed.reconfigure(config) == []
    assert bed.publish()
    assert bed.names() == ["cpu-2", "cpu-3"]


def test_an_unreadable_online_file_keeps_the_last_reading(
    individual: Bed, caplog: pytest.LogCaptureFixture
) -> None:
    bed = individual
    bed.set_online("0-2")
    bed.publish()
    bed.set_online("garbage")
    with caplog.at_level(logging.WARNING, logger="enforcer"):
        assert not bed.publish()
    assert bed.names() == ["cpu-1", "cpu-2"]
    assert "keeps the CPUs online it last read" in caplog.text
    assert "online" in caplog.text and "garbage" in caplog.text


def free_capacity(bed: Bed) -> int:
    """What the scheduler sees free on numa-0: its capacity less what prepared claims hold."""
    (device,) = bed.devices()
    consumed = sum(len(held.exclusive) for held in claims(bed.enforcer.policy).values())
    return int(device["capacity"]["cpu"]["value"]) - consumed


def really_free(bed: Bed, online: str) -> CPUSet:
    policy = bed.enforcer.policy
    held = CPUSet().union(*(a.exclusive for a in policy.admitted.values()))
    return (policy.available - policy.reserved - held) & CPUSet.parse(online)


@pytest.mark.parametrize("unplugged", ["claimed", "free", "both"])
def test_grouped_capacity_never_offers_a_claimed_cpu_as_free(grouped: Bed, unplugged: str) -> None:
    bed = grouped
    bed.prepare("one")
    (claimed_cpu,) = claims(bed.enforcer.policy)["uid-one"].exclusive
    create(bed.enforcer, StandInRuntime(), "exclusive", guaranteed("1"))  # a container's own
    bed.publish()
    assert free_capacity(bed) == len(really_free(bed, "0-3")) == 1
    others = really_free(bed, "0-3")
    gone = {
        "claimed": CPUSet.of(claimed_cpu),
        "free": others,
        "both": others | CPUSet.of(claimed_cpu),
    }[unplugged]
    online = str(CPUSet.of(0, 1, 2, 3) - gone)
    bed.set_online(online)
    bed.publish()
    assert free_capacity(bed) == len(really_free(bed, online))
