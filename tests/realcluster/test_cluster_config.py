"""Configuration from the cluster against the real API server (docs/install.md, Step 5;
docs/enforcer.md): the node's ConfigMap edited with kubectl is applied by the running enforcer
(the pods' cgroups show the new reserved CPU); a bad one is refused with a Warning Event on the
ConfigMap and the Node's status annotation both naming the offending keys, and the old
configuration stays in force (a new pod is placed by it). The NodeResourceTopology object,
its CRD installed from deploy/components/node-resource-topology as docs/scheduling.md says, is
written through the real API server's validation and follows the allocations.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from enforcer.topology import CPUSet
from tests.support.cluster import truth
from tests.support.cluster import workloads as w
from tests.support.cluster.bed import Cluster
from tests.support.cluster.kube import Kubectl
from tests.support.cluster.layout import NODE_NAME

NS = "cluster-config"
ALL = CPUSet.parse(Path("/sys/fs/cgroup/cpuset/cpuset.cpus").read_text())
NRT = "noderesourcetopologies.topology.node.k8s.io"
# CPU 1 reserved instead of 0, and two mistakes the enforcer must name by key path.
BAD_CONFIG = 'policy:\n  name: static\n  reservedCPUs: "1"\n  bogus: 1\n  pinMemory: maybe\n'
RESERVE_1 = 'policy:\n  name: static\n  reservedCPUs: "1"\n'
NRT_CONFIG = w.STATIC_CONFIG + "nodeResourceTopology:\n  enabled: true\n  minIntervalSeconds: 1\n"
# The enforcer's API-server client (the ConfigMap watch, the Node's status, Events, the
# NodeResourceTopology) is the same on either transport; the re-pinning an applied edit causes
# goes through the transport as every freed CPU does, checked in both modes by test_placement,
# test_restarts and test_resize.
pytestmark = pytest.mark.one_mode


def cpus(cluster: Cluster, pod: str) -> CPUSet:
    (c,) = truth.containers_of(cluster.kubectl, NS, pod)
    return CPUSet.parse(c.cpus)


def edit(kubectl: Kubectl, config_yaml: str) -> str:
    """`kubectl apply` of the node's ConfigMap with new content; its new resourceVersion."""
    cm = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": w.NODE_CONFIGMAP, "namespace": w.ENFORCER_NS},
        "data": {"config.yaml": config_yaml},
    }
    kubectl.apply(w.dump(cm))
    got = kubectl.json("-n", w.ENFORCER_NS, "get", "configmap", w.NODE_CONFIGMAP)
    return str(got["metadata"]["resourceVersion"])


def status_for(kubectl: Kubectl, version: str) -> dict[str, Any] | None:
    """The Node's config-status once it reports on that resourceVersion of the ConfigMap."""
    st = w.node_status(kubectl)
    return st if st.get("resourceVersion") == version else None


def refusal_events(kubectl: Kubectl) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = kubectl.json(
        "-n",
        w.ENFORCER_NS,
        "get",
        "events",
        f"--field-selector=involvedObject.name={w.NODE_CONFIGMAP},reason=ConfigRefused",
    )["items"]
    return items


def place(cluster: Cluster, name: str, resources: dict[str, Any] | None) -> None:
    cluster.kubectl.apply(w.dump(w.pod(name, NS, w.container("app", resources))))
    w.wait_pod_running(cluster.kubectl, NS, name)


def delete(cluster: Cluster, *names: str) -> None:
    cluster.kubectl.run("-n", NS, "delete", "pod", *names, "--wait=true", timeout=180)


@pytest.fixture(scope="module")
def node(cluster: Cluster) -> Iterator[Cluster]:
    w.configure(cluster.kubectl)
    cluster.kubectl.apply(w.dump(w.namespace(NS)))
    place(cluster, "shared", w.burstable())
    yield cluster
    w.delete_namespace(cluster.kubectl, NS)
    w.configure(cluster.kubectl)  # the other modules' configuration, in force again


def test_a_bad_configmap_is_refused_with_its_keys_and_the_old_one_kept(node: Cluster) -> None:
    k = node.kubectl
    version = edit(k, BAD_CONFIG)
    w.wait_for("the refusal on the Node", lambda: status_for(k, version), 90)
    st = status_for(k, version)
    assert st is not None and st["applied"] is False
    errors = " ".join(st["errors"])
    assert "policy.bogus" in errors and "policy.pinMemory" in errors
    assert st["inForce"] == f"configmap/{w.ENFORCER_NS}/{w.NODE_CONFIGMAP}"  # the last good

    def event() -> dict[str, Any] | None:
        for e in refusal_events(k):
            if e["involvedObject"].get("resourceVersion") == version:
                return e
        return None

    w.wait_for("the Warning Event on the ConfigMap", event, 90)
    e = event()
    assert e is not None and e["type"] == "Warning" and e["source"]["host"] == NODE_NAME
    assert "policy.bogus" in e["message"] and "policy.pinMemory" in e["message"]
    # The old configuration (CPU 0 reserved) still places pods: CPU 1 is the exclusive one.
    place(node, "after-refusal", w.guaranteed("1"))
    assert cpus(node, "after-refusal") == ALL - CPUSet.parse("0")
    assert cpus(node, "shared") == CPUSet.parse("0")
    delete(node, "after-refusal")


def test_an_edited_configmap_is_applied_to_the_node(node: Cluster) -> None:
    k = node.kubectl
    version = edit(k, RESERVE_1)
    w.wait_for("the new configuration applied", lambda: status_for(k, version), 90)
    st = status_for(k, version)
    assert st is not None and st["applied"] is True and st["errors"] == []
    # CPU 1 is the reserved one now: a Guaranteed pod gets CPU 0, the others run on CPU 1.
    place(node, "after-edit", w.guaranteed("1"))
    assert cpus(node, "after-edit") == CPUSet.parse("0")
    w.wait_for("the shared pod on CPU 1", lambda: cpus(node, "shared") == CPUSet.parse("1"))
    delete(node, "after-edit")
    version = edit(k, w.STATIC_CONFIG)
    w.wait_for("CPU 0 reserved again", lambda: status_for(k, version), 90)


def nrt(k: Kubectl) -> dict[str, Any] | None:
    out = k.run("get", NRT, NODE_NAME, "-o", "json", check=False)
    return json.loads(out.stdout) if out.returncode == 0 else None


def holders(cluster: Cluster) -> str:
    """`resource-enforcer status` of the node's state folder (for a failure's message)."""
    cli = Path(sys.executable).parent / "resource-enforcer"
    argv = [str(cli), "status", f"--state-dir={cluster.lay.enforcer_state}"]
    return subprocess.run(argv, capture_output=True, text=True, timeout=60).stdout


def node_zone_cpu(obj: dict[str, Any]) -> dict[str, str]:
    zone = next(z for z in obj["zones"] if z["type"] == "Node")
    cpu: dict[str, str] = next(r for r in zone["resources"] if r["name"] == "cpu")
    return cpu


def test_node_resource_topology_through_the_crds_validation(node: Cluster) -> None:
    k = node.kubectl
    assert k.run("get", "crd", NRT).returncode == 0  # installed with the component
    version = edit(k, NRT_CONFIG)
    w.wait_for("the configuration applied", lambda: status_for(k, version), 90)
    w.wait_for("the NodeResourceTopology object", lambda: nrt(k), 90)
    obj = nrt(k)
    assert obj is not None and obj["apiVersion"] == "topology.node.k8s.io/v1alpha2"
    owner = obj["metadata"]["ownerReferences"][0]
    assert (
        owner["kind"] == "Node"
        and owner["uid"] == k.json("get", "node", NODE_NAME)["metadata"]["uid"]
    )
    cpu = node_zone_cpu(obj)
    assert (cpu["capacity"], cpu["allocatable"]) == (str(len(ALL)), "1")

    def available() -> str | None:
        o = nrt(k)
        return node_zone_cpu(o)["available"] if o else None

    try:  # nothing held exclusively: CPU 1 is available
        w.wait_for("CPU 1 available", lambda: available() == "1", 60)
    except AssertionError as exc:
        raise AssertionError(f"{exc}: {nrt(k)}; the enforcer's state: {holders(node)}") from None
    place(node, "exclusive", w.guaranteed("1"))

    w.wait_for("the exclusive CPU taken off what is available", lambda: available() == "0", 90)
    delete(node, "exclusive")
    w.wait_for("the CPU available again", lambda: available() == "1", 90)
    # Switched off: the node's object goes.
    version = edit(k, w.STATIC_CONFIG)
    w.wait_for("the configuration applied", lambda: status_for(k, version), 90)
    w.wait_for("the object deleted", lambda: nrt(k) is None, 90)
