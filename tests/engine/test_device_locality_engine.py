"""policy.preferCloseToDevices through the engine and kubelet's pod-resources API: the devices a
(real gRPC) kubelet reports for a container, with their NUMA node, move its exclusive CPUs and
memory there; `status` and the log say so. A kubelet that does not answer, has no socket, or
lacks Get (KubeletPodResourcesGet off) never refuses or fails a container: it is placed as
without the key, with a log line naming the socket. DRA devices take the NUMA node of their
ResourceSlice (`resource.kubernetes.io/numaNode`)."""

from __future__ import annotations

import json
import logging
import uuid
from pathlib import Path

import pytest

from enforcer.commands.status import status
from enforcer.configuration import parse_config
from enforcer.cri import api_pb2
from enforcer.cri.convert import container_create
from enforcer.decode import ContainerCreate
from enforcer.engine import Enforcer
from enforcer.engine.kubelet_record import KubeletRecord
from enforcer.podresources import PodResourcesClient, socket_path
from enforcer.podresources.slices import numa_of
from enforcer.state import StateStore
from enforcer.topology import CPUSet, Topology
from tests.engine.test_engine_core import Clock, StandInRuntime
from tests.support.fake_podresources import FakeContainer, FakePodResources
from tests.support.kubelet import container_config_for, sandbox_config_for
from tests.support.pods import guaranteed, manifest, sleeper

MACHINE = Topology.synthetic(sockets=2, cores_per_node=4)  # 2 nodes of 8 CPUs
NIC = "example.com/fake-nic"


def config(policy: str, on: bool = True):  # type: ignore[no-untyped-def]
    return parse_config(
        {"policy": {"name": policy, "reservedCPUs": "0", "preferCloseToDevices": on}}
    )


def start(tmp_path: Path, policy: str, client: PodResourcesClient, on: bool = True) -> Enforcer:
    store = StateStore(tmp_path / "state")
    store.ensure_dir()
    e = Enforcer(
        topology=MACHINE,
        config=config(policy, on),
        store=store,
        runtime=StandInRuntime(),
        clock=Clock(),
        devices=client,
    )
    e.restore_saved()
    e.reconcile()
    return e


def create_of(name: str, cpu: str) -> ContainerCreate:
    uid = str(uuid.uuid5(uuid.NAMESPACE_URL, name))
    pod = manifest(name, sleeper(resources=guaranteed(cpu)))
    request = api_pb2.CreateContainerRequest(
        pod_sandbox_id=f"sandbox-{name}",
        config=container_config_for(
            pod, pod["spec"]["containers"][0], uid, memory_capacity=1 << 34
        ),
        sandbox_config=sandbox_config_for(pod, uid),
    )
    return container_create(request)


def placed(e: Enforcer, name: str, cpu: str = "2") -> tuple[CPUSet, CPUSet]:
    _, pinning = e.create(
        create_of(name, cpu), sandbox_id=f"sandbox-{name}", resources=KubeletRecord()
    )
    return CPUSet.parse(pinning.cpus), CPUSet.parse(pinning.mems)


def status_row(tmp_path: Path, capsys: pytest.CaptureFixture[str], pod: str) -> dict:
    """The container's row as `resource-enforcer status --output json` shows it (read from
    the state file, as a separate process)."""
    capsys.readouterr()
    assert status(str(tmp_path / "state"), "json") == 0
    rows = json.loads(capsys.readouterr().out)["containers"]
    (row,) = [r for r in rows if r["pod"] == pod]
    return dict(row)


def node1() -> CPUSet:
    return MACHINE.cpus_of_node(1)


@pytest.fixture
def kubelet(tmp_path: Path):  # type: ignore[no-untyped-def]
    with FakePodResources(Path(socket_path(str(tmp_path / "kubelet")))) as fake:
        yield fake


@pytest.mark.parametrize("policy", ["static", "topology-aware"])
def test_cpus_and_memory_go_to_the_devices_node(
    tmp_path: Path,
    kubelet: FakePodResources,
    policy: str,
    caplog: pytest.LogCaptureFixture,
    capsys: pytest.CaptureFixture[str],
) -> None:
    client = PodResourcesClient(str(kubelet.socket))
    # Without the key the pod goes where the policy likes; the device is on the other node.
    kubelet.pods[("e2e", "nic")] = [FakeContainer("app", {NIC: (["nic-0"], [0])})]
    plain, _ = placed(start(tmp_path / "off", policy, client, on=False), "nic")
    (usual,) = MACHINE.nodes_of_cpus(plain)
    node = 1 - usual
    kubelet.pods[("e2e", "nic")] = [FakeContainer("app", {NIC: (["nic-0"], [node])})]
    e = start(tmp_path, policy, client)
    with caplog.at_level(logging.INFO, logger="enforcer"):
        cpus, mems = placed(e, "nic")
    assert cpus <= MACHINE.cpus_of_node(node) and len(cpus) == 2
    assert mems == CPUSet.of(node)
    note = f"close to devices {NIC}=nic-0 on NUMA node {node}"
    assert f"e2e/nic container app: {note}" in caplog.text
    assert f"kubelet gave it {NIC}=nic-0 on NUMA node(s) {node}" in caplog.text
    assert status_row(tmp_path, capsys, "nic")["devices"] == note


def test_get_off_falls_back_to_list(tmp_path: Path, kubelet: FakePodResources) -> None:
    kubelet.get_enabled = False
    kubelet.pods[("e2e", "nic")] = [FakeContainer("app", {NIC: (["nic-0"], [1])})]
    e = start(tmp_path, "static", PodResourcesClient(str(kubelet.socket)))
    cpus, _ = placed(e, "nic")
    assert cpus <= node1()


def test_a_kubelet_that_does_not_answer_places_without_the_preference(
    tmp_path: Path, kubelet: FakePodResources, caplog: pytest.LogCaptureFixture
) -> None:
    kubelet.hang = True
    kubelet.pods[("e2e", "nic")] = [FakeContainer("app", {NIC: (["nic-0"], [1])})]
    client = PodResourcesClient(str(kubelet.socket), deadline=0.5)
    e = start(tmp_path, "static", client)
    with caplog.at_level(logging.INFO, logger="enforcer"):
        first, _ = placed(e, "nic")
        second, _ = placed(e, "other")
    assert not first & node1() and not second & node1()  # the normal placement, no refusal
    assert f"pod-resources API at {kubelet.socket} did not answer (DEADLINE_EXCEEDED" in caplog.text
    assert "did not answer lately" in caplog.text  # the second creation did not ask again
    assert kubelet.calls == 1


def test_no_socket_places_without_the_preference(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    missing = socket_path(str(tmp_path / "nowhere"))
    e = start(tmp_path, "topology-aware", PodResourcesClient(missing))
    with caplog.at_level(logging.WARNING, logger="enforcer"):
        cpus, _ = placed(e, "nic")
    assert len(cpus) == 2
    assert f"no socket at {missing}" in caplog.text


def test_dra_devices_take_their_slices_numa_node(
    tmp_path: Path, kubelet: FakePodResources, capsys: pytest.CaptureFixture[str]
) -> None:
    kubelet.pods[("e2e", "gpu")] = [
        FakeContainer("app", claimed=[("gpu.example.com", "node-a", "gpu-1")])
    ]
    slices = {("gpu.example.com", "node-a", "gpu-1"): 1}
    client = PodResourcesClient(str(kubelet.socket), node_of=lambda d, p, n: slices.get((d, p, n)))
    e = start(tmp_path, "static", client)
    cpus, mems = placed(e, "gpu")
    assert cpus <= node1() and mems == CPUSet.of(1)
    assert (
        "gpu.example.com/node-a/gpu-1 on NUMA node 1"
        in status_row(tmp_path, capsys, "gpu")["devices"]
    )


def test_numa_node_read_from_a_slice_device() -> None:
    std = {"attributes": {"resource.kubernetes.io/numaNode": {"int": 3}}}
    own = {"attributes": {"gpu.example.com/numaNode": {"int": 2}}}
    assert numa_of(std, "gpu.example.com") == 3
    assert numa_of(own, "gpu.example.com") == 2
    assert numa_of({"attributes": {"numaNode": {"string": "1"}}}, "d") is None
    assert numa_of({"name": "x"}, "d") is None
