"""The NodeResourceTopology, end to end: `resource-enforcer run` (console script) in front of the
private containerd, pods from the kubelet emulator, and the real `kubernetes` client inside the
enforcer writing to the fake API server, which serves the vendored CRD
(deploy/components/node-resource-topology/crd.yaml) and validates every write against its
OpenAPI schema as the real API server does (fieldValidation=Strict: an unknown field would be
refused, not dropped).

This machine is one NUMA node; the static policy reserves CPU 0, so a Guaranteed 1-CPU pod
takes one of the others exclusively (read back from its cgroup).
"""

from __future__ import annotations

import itertools
import json
import os
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from enforcer.topology import CPUSet
from tests.cluster.test_cluster_e2e import cpus_of, sample, wait_for
from tests.support.containerd import PrivateContainerd
from tests.support.enforcer_process import EnforcerProcess, free_port
from tests.support.fake_apiserver import FakeAPIServer
from tests.support.kubelet import KubeletEmulator
from tests.support.pods import guaranteed, manifest, sleeper

pytestmark = pytest.mark.containerd

ROOT = Path(__file__).resolve().parents[2]
CRD = ROOT / "deploy" / "components" / "node-resource-topology" / "crd.yaml"
NODE = "nrt-node"
GROUP, PLURAL = "topology.node.k8s.io", "noderesourcetopologies"
ALL = CPUSet.parse(Path("/sys/fs/cgroup/cpuset/cpuset.cpus").read_text())
RESERVED = CPUSet.of(min(ALL))
INTERVAL = 2.0


def config(enabled: bool) -> str:
    return (
        f'policy: {{name: static, reservedCPUs: "{RESERVED}"}}\n'
        f"nodeResourceTopology: {{enabled: {str(enabled).lower()}, "
        f"minIntervalSeconds: {INTERVAL}}}\n"
    )


@pytest.fixture
def api() -> Iterator[FakeAPIServer]:
    server = FakeAPIServer().start()
    server.put_node(NODE)
    yield server
    server.stop()


@pytest.fixture
def started(
    containerd: PrivateContainerd, api: FakeAPIServer, tmp_path: Path
) -> Iterator[tuple[EnforcerProcess, KubeletEmulator, Path]]:
    config_file = tmp_path / "config.yaml"
    config_file.write_text(config(True))
    enforcer = EnforcerProcess(
        tmp_path / "enforcer",
        runtime_socket=containerd.socket,
        config=str(config_file),
        metrics_address=f"127.0.0.1:{free_port()}",
        extra_args=[
            *("--cluster-config", "off", "--node-name", NODE),
            *("--kubeconfig", api.kubeconfig(tmp_path / "kubeconfig")),
        ],
    ).start()
    kubelet = KubeletEmulator(enforcer.relay_socket, log_root=tmp_path / "pods")
    try:
        yield enforcer, kubelet, config_file
    finally:
        kubelet.close()
        assert enforcer.stop() == 0, enforcer.log_tail()


def nrt(api: FakeAPIServer) -> dict[str, Any] | None:
    return api.custom_object(GROUP, PLURAL, NODE)


def node_cpu(api: FakeAPIServer) -> dict[str, str]:
    obj = nrt(api)
    assert obj is not None
    (zone,) = [z for z in obj["zones"] if z["name"] == "node-0"]
    (cpu,) = [r for r in zone["resources"] if r["name"] == "cpu"]
    return cpu


def available(api: FakeAPIServer) -> int | None:
    return int(node_cpu(api)["available"]) if nrt(api) is not None else None


def scrape(enforcer: EnforcerProcess) -> str:
    with urllib.request.urlopen(enforcer.metrics_url + "/metrics", timeout=5) as resp:
        return resp.read().decode()


def written(api: FakeAPIServer) -> list[float]:
    return [
        t for t, method, _, code in api.custom_writes if method in ("POST", "PUT") and code < 300
    ]


def test_published_owned_by_the_node_and_following_allocations(
    api: FakeAPIServer, started: tuple[EnforcerProcess, KubeletEmulator, Path]
) -> None:
    enforcer, kubelet, config_file = started
    online = len(ALL)

    # No CRD in the cluster yet: the enforcer says what is missing and keeps trying.
    wait_for(
        lambda: "install the CRD" in enforcer.log_tail(200),
        what="a log line naming the missing CRD",
    )
    assert (
        sample(
            scrape(enforcer),
            "resource_enforcer_node_resource_topology_writes_total",
            outcome="failed",
        )
        >= 1
    )
    assert nrt(api) is None

    api.install_crd(CRD)
    wait_for(lambda: nrt(api) is not None, timeout=INTERVAL + 10, what="the object created")
    obj = nrt(api)
    assert obj is not None
    node_uid = api.nodes[NODE]["metadata"]["uid"]
    assert obj["metadata"]["ownerReferences"] == [
        {"apiVersion": "v1", "kind": "Node", "name": NODE, "uid": node_uid}
    ]
    assert obj["apiVersion"] == "topology.node.k8s.io/v1alpha2"
    assert {"name": "topologyManagerPolicy", "value": "none"} in obj["attributes"]
    assert {"name": "resource-enforcer.dev/policy", "value": "static"} in obj["attributes"]
    assert [(z["name"], z["type"], z.get("parent")) for z in obj["zones"]] == [
        ("socket-0", "Socket", None),
        ("node-0", "Node", "socket-0"),
    ]
    assert node_cpu(api) == {
        "name": "cpu",
        "capacity": str(online),
        "allocatable": str(online - 1),
        "available": str(online - 1),
    }

    # A Guaranteed 1-CPU pod takes a CPU: the object follows, as do the gauges.
    pod = kubelet.run_pod(manifest("pinned", sleeper(resources=guaranteed("1"))))
    taken = cpus_of(pod)
    assert len(taken) == 1 and not taken & RESERVED
    wait_for(lambda: available(api) == online - 2, timeout=INTERVAL + 10, what="1 CPU fewer")
    metrics = scrape(enforcer)
    assert sample(metrics, "resource_enforcer_numa_node_cpus", node="0", use="exclusive") == 1
    assert sample(metrics, "resource_enforcer_numa_node_cpus", node="0", use="reserved") == 1
    assert sample(metrics, "resource_enforcer_numa_node_cpus", node="0", use="free") == online - 2
    assert sample(metrics, "resource_enforcer_pool_cpus", pool="root", use="exclusive") == 1

    # A burst of changes is written at most once per minIntervalSeconds, the last state last.
    kubelet.remove_pod(pod)
    again = kubelet.run_pod(manifest("again", sleeper(resources=guaranteed("1"))))
    kubelet.remove_pod(again)
    wait_for(lambda: available(api) == online - 1, timeout=INTERVAL + 10, what="the CPU back")
    times = written(api)
    assert len(times) >= 2
    gaps = [b - a for a, b in itertools.pairwise(times)]
    assert min(gaps) >= INTERVAL - 0.1, gaps

    # Every write passed the CRD's schema: nothing refused, no field dropped.
    assert api.refusals == []
    assert api.warnings == []

    # The Node goes: the garbage collector takes the object with it. The Node comes back (a
    # new uid): the next change publishes a new object, owned by the new Node.
    api.delete_node(NODE)
    assert nrt(api) is None
    api.put_node(NODE)
    new_uid = api.nodes[NODE]["metadata"]["uid"]
    pod = kubelet.run_pod(manifest("after", sleeper(resources=guaranteed("1"))))
    wait_for(lambda: nrt(api) is not None, timeout=2 * INTERVAL + 10, what="the object again")
    obj = nrt(api)
    assert obj is not None
    assert obj["metadata"]["ownerReferences"][0]["uid"] == new_uid
    wait_for(lambda: available(api) == online - 2, timeout=INTERVAL + 10, what="1 CPU fewer")
    kubelet.remove_pod(pod)

    # Switched off in the configuration (reloaded live): the object is deleted.
    config_file.write_text(config(False))
    wait_for(lambda: nrt(api) is None, timeout=INTERVAL + 10, what="the object deleted")
    # The log line follows the API server's answer: wait for it too, not only for the object.
    wait_for(
        lambda: "NodeResourceTopology deleted" in enforcer.log_tail(2000),
        timeout=10,
        what="the log line saying it was deleted",
    )
    # The one write refused all along: the replace of the object the collector had taken.
    assert [(r["code"], r["reason"]) for r in api.refusals] == [(404, "NotFound")]
    assert api.warnings == []

    # What the enforcer asked of the API server is what the component's RBAC allows.
    verbs = {"GET": "get", "POST": "create", "PUT": "update", "PATCH": "patch", "DELETE": "delete"}
    used = {verbs[m] for m, path in api.requests if path.startswith(f"/apis/{GROUP}/")}
    (rule,) = yaml.safe_load((CRD.parent / "clusterrole.yaml").read_text())["rules"]
    assert used == set(rule["verbs"])


def test_no_object_without_a_node_name(
    containerd: PrivateContainerd, api: FakeAPIServer, tmp_path: Path
) -> None:
    """Enabled, but no node to name it after: a clear error, and the relay serves on."""
    api.install_crd(CRD)
    config_file = tmp_path / "config.yaml"
    config_file.write_text(config(True))
    env_node = os.environ.pop("NODE_NAME", None)
    try:
        enforcer = EnforcerProcess(
            tmp_path / "enforcer",
            runtime_socket=containerd.socket,
            config=str(config_file),
            extra_args=["--kubeconfig", api.kubeconfig(tmp_path / "kubeconfig")],
        ).start()
        try:
            wait_for(
                lambda: (
                    "no NodeResourceTopology is published: it needs the node's name"
                    in enforcer.log_tail(200)
                ),
                what="the error naming what is missing",
            )
            enforcer.wait_ready()
            assert api.custom_writes == []
        finally:
            assert enforcer.stop() == 0
    finally:
        if env_node is not None:
            os.environ["NODE_NAME"] = env_node
    assert json.loads(json.dumps(api.custom[(GROUP, PLURAL)])) == {}
