"""The test-only GPU driver (tests/support/fake_gpu_driver.py) as kubelet sees it: registration
over its socket, NodePrepareResources answering with the claim's devices of this driver, a
per-claim error; and its ResourceSlice as plan reads it, aligned with our CPUs by NUMA node."""

from __future__ import annotations

import tempfile
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import grpc
import pytest

from enforcer.claims.allocate import Allocator
from enforcer.claims.model import DeviceClass, claim_spec, devices_of_slice
from enforcer.dra.devices import build_devices, slice_specs
from enforcer.draapi import dra_pb2, dra_pb2_grpc, registration_pb2, registration_pb2_grpc
from enforcer.topology import CPUSet, Topology
from tests.support.fake_gpu_driver import DRIVER, FakeGPU, FakeGPUDriver, resource_slice

NODE = "node-1"
CLAIMS: dict[tuple[str, str], Mapping[str, Any]] = {
    ("ai", "trainer-hw"): {
        "status": {
            "allocation": {
                "devices": {
                    "results": [
                        {"request": "gpu", "driver": DRIVER, "pool": NODE, "device": "gpu-1"},
                        {
                            "request": "cpus",
                            "driver": "cpu.resource-enforcer.dev",
                            "pool": NODE,
                            "device": "cpu-4",
                        },
                    ]
                }
            }
        }
    }
}


def lookup(namespace: str, name: str) -> Mapping[str, Any]:
    return CLAIMS[(namespace, name)]


@pytest.fixture
def driver() -> Iterator[FakeGPUDriver]:
    # A unix socket's path holds at most 107 bytes: a short folder of its own under /tmp.
    with tempfile.TemporaryDirectory(prefix="kre-gpu-") as root:
        d = FakeGPUDriver(Path(root), NODE, lookup)
        d.start()
        yield d
        d.stop()


def test_kubelet_registers_it_and_prepares_claims(driver: FakeGPUDriver) -> None:
    with grpc.insecure_channel(f"unix://{driver.registration_socket}") as channel:
        reg = registration_pb2_grpc.RegistrationStub(channel)
        info = reg.GetInfo(registration_pb2.InfoRequest(), timeout=30)
        assert (info.type, info.name, list(info.supported_versions)) == (
            "DRAPlugin",
            DRIVER,
            ["v1.DRAPlugin"],
        )
        reg.NotifyRegistrationStatus(
            registration_pb2.RegistrationStatus(plugin_registered=True), timeout=30
        )
    assert driver.registration.registered.is_set()
    with grpc.insecure_channel(f"unix://{info.endpoint}") as channel:
        dra = dra_pb2_grpc.DRAPluginStub(channel)
        answer = dra.NodePrepareResources(
            dra_pb2.NodePrepareResourcesRequest(
                claims=[
                    dra_pb2.Claim(namespace="ai", name="trainer-hw", uid="u1"),
                    dra_pb2.Claim(namespace="ai", name="gone", uid="u2"),
                ]
            ),
            timeout=30,
        )
        got = answer.claims["u1"]
        assert got.error == ""
        assert [(list(d.request_names), d.pool_name, d.device_name) for d in got.devices] == [
            (["gpu"], NODE, "gpu-1")
        ]
        assert answer.claims["u2"].error.startswith("claim ai/gone: ")
        done = dra.NodeUnprepareResources(
            dra_pb2.NodeUnprepareResourcesRequest(claims=[dra_pb2.Claim(uid="u1")]), timeout=30
        )
        assert done.claims["u1"].error == ""


def test_its_slice_aligns_our_cpus_with_a_gpu_by_numa_node(
    topologies: dict[str, Topology],
) -> None:
    topology = topologies["4-socket-server-nosnc"]
    gpus = [FakeGPU(0, 0, "pci0000:00"), FakeGPU(1, 3, "pci0000:c0")]
    ours = slice_specs(
        NODE, build_devices(topology, topology.online - CPUSet([0]), "individual"), 1
    )
    devices = [
        d for s in [*ours, resource_slice(NODE, gpus)["spec"]] for d in devices_of_slice(s, "s")
    ]
    classes = {
        "cpu.resource-enforcer.dev": DeviceClass(
            "cpu.resource-enforcer.dev", ('device.driver == "cpu.resource-enforcer.dev"',)
        ),
        DRIVER: DeviceClass(DRIVER, (f'device.driver == "{DRIVER}"',)),
    }
    spec = claim_spec(
        {
            "devices": {
                "requests": [
                    {
                        "name": "gpu",
                        "exactly": {
                            "deviceClassName": DRIVER,
                            "selectors": [
                                {"cel": {"expression": f'device.attributes["{DRIVER}"].index == 1'}}
                            ],
                        },
                    },
                    {
                        "name": "cpus",
                        "exactly": {"deviceClassName": "cpu.resource-enforcer.dev", "count": 2},
                    },
                ],
                "constraints": [{"matchAttribute": "resource.kubernetes.io/numaNode"}],
            }
        },
        "spec",
    )
    got = Allocator(devices, classes).allocate(spec)
    cpus = [int(a.device.name.removeprefix("cpu-")) for a in got if a.request == "cpus"]
    assert [a.device.name for a in got if a.request == "gpu"] == ["gpu-1"]
    # GPU 1 is on NUMA node 3: CPUs 54-71,126-143.
    assert cpus == [54, 55]
