"""Manifests the cluster's tests and demo apply, and the enforcer's configuration for this
2-CPU machine: the static policy with CPU 0 reserved, so a Guaranteed 1-CPU pod takes CPU 1
exclusively and every other pod shares CPU 0 (the reserved CPUs stay in the shared pool, as with
kubelet's own static policy)."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

import yaml

from enforcer.cluster import STATUS_ANNOTATION
from tests.support.cluster.kube import Kubectl
from tests.support.cluster.layout import NODE_NAME
from tests.support.images import BUSYBOX_IMAGE

ENFORCER_NS = "resource-enforcer"
NODE_CONFIGMAP = f"resource-enforcer-config.node.{NODE_NAME}"
SLEEPER = "trap 'exit 0' TERM; sleep 3600 & wait"
STATIC_CONFIG = 'policy:\n  name: static\n  reservedCPUs: "0"\n'


def guaranteed(cpu: str = "1", memory: str = "64Mi") -> dict[str, Any]:
    return {"requests": {"cpu": cpu, "memory": memory}, "limits": {"cpu": cpu, "memory": memory}}


def burstable(cpu: str = "100m", memory: str = "32Mi") -> dict[str, Any]:
    return {"requests": {"cpu": cpu, "memory": memory}}


def container(name: str = "app", resources: dict[str, Any] | None = None) -> dict[str, Any]:
    c: dict[str, Any] = {
        "name": name,
        "image": BUSYBOX_IMAGE,
        "imagePullPolicy": "Never",
        # PID 1 of a container has no default action for SIGTERM: a bare `sleep` ignores it
        # and kubelet waits out its minimum grace period (2 s, whatever the pod's 0) before
        # SIGKILL, on every deletion. The trap makes it end on kubelet's SIGTERM at once.
        "command": ["sh", "-c", SLEEPER],
    }
    if resources:
        c["resources"] = resources
    return c


def pod_spec(*containers: dict[str, Any]) -> dict[str, Any]:
    return {
        "containers": list(containers),
        # Not 0: a pod deleted with 0 leaves the API at once while kubelet still stops its
        # containers, so `kubectl delete --wait` returned with the CPU still held and the next
        # Guaranteed pod was refused (ResourceExhausted) and retried after kubelet's 10 s
        # back-off. With 1 the API keeps the pod until kubelet has stopped its containers,
        # which SLEEPER's trap makes immediate.
        "terminationGracePeriodSeconds": 1,
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
    }


def pod(
    name: str,
    namespace: str,
    *containers: dict[str, Any],
    annotations: dict[str, str] | None = None,
) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": namespace}
    if annotations:
        meta["annotations"] = annotations
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": pod_spec(*containers)}


def workload(kind: str, name: str, namespace: str, *containers: dict[str, Any]) -> dict[str, Any]:
    labels = {"app": name}
    spec: dict[str, Any] = {
        "selector": {"matchLabels": labels},
        "template": {"metadata": {"labels": labels}, "spec": pod_spec(*containers)},
    }
    if kind == "Deployment":
        spec["replicas"] = 1
    return {
        "apiVersion": "apps/v1",
        "kind": kind,
        "metadata": {"name": name, "namespace": namespace},
        "spec": spec,
    }


def namespace(name: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}


def dump(*docs: dict[str, Any]) -> str:
    return yaml.safe_dump_all(docs, sort_keys=False)


def node_status(kubectl: Kubectl) -> dict[str, Any]:
    node = kubectl.json("get", "node", NODE_NAME)
    raw = node["metadata"].get("annotations", {}).get(STATUS_ANNOTATION)
    return json.loads(raw) if raw else {}


def configure(kubectl: Kubectl, config_yaml: str = STATIC_CONFIG, timeout: float = 90) -> None:
    """Step 5 of docs/install.md: the node's own ConfigMap; waits until the enforcer says it is
    in force (the Node's config-status annotation)."""
    cm = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": NODE_CONFIGMAP, "namespace": ENFORCER_NS},
        "data": {"config.yaml": config_yaml},
    }
    kubectl.apply(dump(cm))
    deadline = time.monotonic() + timeout
    status: dict[str, Any] = {}
    while time.monotonic() < deadline:
        status = node_status(kubectl)
        if status.get("applied") and NODE_CONFIGMAP in str(status.get("inForce", "")):
            return
        time.sleep(1)
    raise AssertionError(f"the enforcer did not take {NODE_CONFIGMAP} in {timeout} s: {status}")


def wait_pod_running(kubectl: Kubectl, ns: str, name: str, timeout: float = 120) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    p: dict[str, Any] = {}
    while time.monotonic() < deadline:
        out = kubectl.run("-n", ns, "get", "pod", name, "-o", "json", check=False)
        if out.returncode == 0:
            p = json.loads(out.stdout)
            sts = p["status"].get("containerStatuses", [])
            if sts and all("running" in s.get("state", {}) for s in sts):
                return p
        time.sleep(1)
    raise AssertionError(f"pod {ns}/{name} not running after {timeout} s: {p.get('status')}")


def delete_namespace(kubectl: Kubectl, name: str) -> None:
    """Each module's pods go with its namespace: the node has 2 CPUs to share between them."""
    kubectl.run("delete", "namespace", name, "--wait=true", "--ignore-not-found", timeout=300)


def wait_for(what: str, check: Callable[[], object], timeout: float = 120) -> None:
    """Poll ``check`` every second until it is true; AssertionError naming ``what`` after
    ``timeout`` seconds (generous: the machine is shared and noisy)."""
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(1)
