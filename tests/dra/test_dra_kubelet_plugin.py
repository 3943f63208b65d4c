"""The driver's sockets, with this test as kubelet: plugin registration as kubelet v1.37's
plugin watcher does it, then NodePrepareResources / NodeUnprepareResources over the DRA v1
service, through the driver into a real engine (over the engine tests' stand-in runtime),
with the CDI spec files read back."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import grpc
import pytest

from enforcer.dra.driver import DRADriver
from enforcer.dra.kubelet_plugin import KubeletPlugin
from enforcer.draapi import dra_pb2, dra_pb2_grpc, registration_pb2, registration_pb2_grpc
from enforcer.engine.claimed import claims
from enforcer.topology import CPUSet
from tests.engine.standins import StandInRuntime, create, enforcer
from tests.support.pods import guaranteed

DRIVER = "cpu.resource-enforcer.dev"


def claim(name: str, *devices: str) -> dict[str, Any]:
    results = [
        {"request": "cpus", "driver": DRIVER, "pool": "node-a", "device": d} for d in devices
    ]
    return {
        "metadata": {"namespace": "ns", "name": name, "uid": f"uid-{name}"},
        "status": {"allocation": {"devices": {"results": results}}},
    }


@pytest.fixture
def bed(tmp_path: Path):  # type: ignore[no-untyped-def]
    runtime = StandInRuntime()
    e = enforcer(tmp_path, runtime)  # static, CPU 0 reserved, CPUs 0-3
    docs = (claim("one", "cpu-2"), claim("two", "cpu-1"), claim("pair", "cpu-2", "cpu-3"))
    api = {("ns", c["metadata"]["name"]): c for c in docs}
    driver = DRADriver(
        e,
        node_name="node-a",
        read_claim=lambda ns, name: api[(ns, name)],
        on_worker=lambda fn: fn(),
        cdi_dir=tmp_path / "cdi",
    )
    # A short folder: a unix socket path is at most 107 bytes.
    kubelet_dir = Path("/tmp") / f"kre-dra-{tmp_path.name[-20:]}"
    plugin = KubeletPlugin(str(kubelet_dir), driver)
    plugin.start()
    yield e, runtime, driver, plugin, tmp_path / "cdi"
    plugin.stop()
    assert not plugin.registration_path.exists() and not plugin.service_path.exists()


def refs(*names: str) -> list[dra_pb2.Claim]:
    return [dra_pb2.Claim(namespace="ns", uid=f"uid-{n}", name=n) for n in names]


def test_kubelet_registers_the_driver_and_prepares_and_unprepares_claims(bed) -> None:  # type: ignore[no-untyped-def]
    e, runtime, driver, plugin, cdi_dir = bed
    with grpc.insecure_channel(f"unix://{plugin.registration_path}") as channel:
        registration = registration_pb2_grpc.RegistrationStub(channel)
        info = registration.GetInfo(registration_pb2.InfoRequest(), timeout=10)
        assert (info.type, info.name) == ("DRAPlugin", DRIVER)
        assert info.endpoint == str(plugin.service_path)
        assert list(info.supported_versions) == ["v1.DRAPlugin"]
        registration.NotifyRegistrationStatus(
            registration_pb2.RegistrationStatus(plugin_registered=True), timeout=10
        )
    assert plugin.registered
    assert plugin.service_path.parent.name == DRIVER
    assert plugin.registration_path.parent.name == "plugins_registry"

    with grpc.insecure_channel(f"unix://{info.endpoint}") as channel:
        dra = dra_pb2_grpc.DRAPluginStub(channel)
        answer = dra.NodePrepareResources(
            dra_pb2.NodePrepareResourcesRequest(claims=refs("one")), timeout=10
        )
        one = answer.claims["uid-one"]
        assert one.error == ""
        [device] = one.devices
        assert (list(device.request_names), device.pool_name, device.device_name) == (
            ["cpus"],
            "node-a",
            "cpu-2",
        )
        assert list(device.cdi_device_ids) == [f"{DRIVER}/claim=uid-one"]
        spec = json.loads((cdi_dir / f"{DRIVER}-claim_uid-one.json").read_text())
        assert spec["kind"] == f"{DRIVER}/claim"
        assert spec["devices"] == [
            {"name": "uid-one", "containerEdits": {"env": ["KRE_DRA_CLAIM_uid_one=uid-one"]}}
        ]
        assert claims(e.policy)["uid-one"].exclusive == CPUSet.of(2)
        # kubelet prepares again after its restart: the same answer, nothing moves.
        again = dra.NodePrepareResources(
            dra_pb2.NodePrepareResourcesRequest(claims=refs("one")), timeout=10
        )
        assert again.claims["uid-one"] == one
        # A container takes CPU 1 exclusively; claim two, allocated CPU 1 before, is refused
        # naming the holder, and the node's devices no longer offer CPU 1 (the claimed CPU 2
        # stays: the scheduler counts it as allocated).
        assert [d["name"] for d in driver.devices()] == ["cpu-1", "cpu-2", "cpu-3"]
        create(e, runtime, "exclusive", guaranteed("1"))
        assert [d["name"] for d in driver.devices()] == ["cpu-2", "cpu-3"]
        both = dra.NodePrepareResources(
            dra_pb2.NodePrepareResourcesRequest(claims=refs("one", "two")), timeout=10
        )
        assert both.claims["uid-one"].error == ""
        assert "CPU 1 is held by container" in both.claims["uid-two"].error
        assert "uid-two" not in claims(e.policy)
        assert not (cdi_dir / f"{DRIVER}-claim_uid-two.json").exists()

        gone = dra.NodeUnprepareResources(
            dra_pb2.NodeUnprepareResourcesRequest(claims=refs("one", "two")), timeout=10
        )
        assert {uid: r.error for uid, r in gone.claims.items()} == {"uid-one": "", "uid-two": ""}
        assert claims(e.policy) == {}
        assert not (cdi_dir / f"{DRIVER}-claim_uid-one.json").exists()


def test_a_claim_of_two_cpus_marks_its_request_once(bed) -> None:  # type: ignore[no-untyped-def]
    plugin = bed[3]
    with grpc.insecure_channel(f"unix://{plugin.service_path}") as channel:
        dra = dra_pb2_grpc.DRAPluginStub(channel)
        answer = dra.NodePrepareResources(
            dra_pb2.NodePrepareResourcesRequest(claims=refs("pair")), timeout=10
        )
    first, second = answer.claims["uid-pair"].devices
    assert (first.device_name, second.device_name) == ("cpu-2", "cpu-3")
    assert list(first.cdi_device_ids) == [f"{DRIVER}/claim=uid-pair"]
    assert list(second.cdi_device_ids) == []


def test_a_claim_deleted_and_made_again_is_refused_by_uid(bed) -> None:  # type: ignore[no-untyped-def]
    plugin = bed[3]
    with grpc.insecure_channel(f"unix://{plugin.service_path}") as channel:
        dra = dra_pb2_grpc.DRAPluginStub(channel)
        stale = dra_pb2.Claim(namespace="ns", uid="uid-old", name="one")
        answer = dra.NodePrepareResources(
            dra_pb2.NodePrepareResourcesRequest(claims=[stale]), timeout=10
        )
        assert "the API server has uid uid-one, kubelet asks for uid-old" in (
            answer.claims["uid-old"].error
        )


def test_grouped_mode_prepares_cpus_our_placement_picks_inside_the_node(tmp_path: Path) -> None:
    from enforcer.configuration import parse_config

    config = parse_config(
        {"policy": {"name": "static", "reservedCPUs": "0"}, "dra": {"mode": "grouped"}}
    )
    e = enforcer(tmp_path, StandInRuntime(), config)
    grouped = claim("two", "numa-0")
    result = grouped["status"]["allocation"]["devices"]["results"][0]
    result.update(consumedCapacity={"cpu": "2"}, shareID="share-1")
    driver = DRADriver(
        e,
        node_name="node-a",
        read_claim=lambda ns, name: grouped,
        on_worker=lambda fn: fn(),
        cdi_dir=tmp_path / "cdi",
    )
    [device] = driver.devices()
    assert device["name"] == "numa-0" and device["capacity"]["cpu"]["value"] == "3"
    from enforcer.dra.kubelet_plugin import ClaimRef

    prepared = driver.prepare(ClaimRef("ns", "uid-two", "two"))
    assert prepared.devices[0].share_id == "share-1"
    held = claims(e.policy)["uid-two"].exclusive
    assert len(held) == 2 and held <= CPUSet.parse("1-3")
    # The claim's own CPUs are not taken off the capacity (the scheduler counts them).
    assert driver.devices()[0]["capacity"]["cpu"]["value"] == "3"
