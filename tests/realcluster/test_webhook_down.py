"""The webhook down, as the real API server handles it: with `failurePolicy: Fail` (deploy/'s
choice) a pod is refused and kubectl says why; with `Ignore` it is admitted without the
annotation and the enforcer places it from kubelet's own CRI values. The cluster is left as
found: the webhook back at two replicas, `Fail` again."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from enforcer.topology import CPUSet
from tests.support.cluster import truth
from tests.support.cluster import workloads as w
from tests.support.cluster.bed import Cluster
from tests.support.cluster.kube import KubectlError

NS = "webhook-down"
ANNOTATION = "resource-enforcer.dev/resources"
ALL = CPUSet.parse(Path("/sys/fs/cgroup/cpuset/cpuset.cpus").read_text())
RESERVED = CPUSet.parse("0")


def set_failure_policy(cluster: Cluster, policy: str) -> None:
    patch = [{"op": "replace", "path": "/webhooks/0/failurePolicy", "value": policy}]
    cluster.kubectl.run(
        "patch",
        "mutatingwebhookconfiguration",
        "resource-enforcer",
        "--type=json",
        "-p",
        json.dumps(patch),
    )


def scale_webhook(cluster: Cluster, replicas: int) -> None:
    cluster.kubectl.run(
        "-n", w.ENFORCER_NS, "scale", "deployment/resource-webhook", f"--replicas={replicas}"
    )


@pytest.fixture(scope="module")
def webhook_down(cluster: Cluster) -> Iterator[Cluster]:
    w.configure(cluster.kubectl)
    cluster.kubectl.apply(w.dump(w.namespace(NS)))
    scale_webhook(cluster, 0)
    deadline = time.monotonic() + 120
    while cluster.kubectl.json(
        "-n", w.ENFORCER_NS, "get", "pods", "-l", "app.kubernetes.io/name=resource-webhook"
    )["items"]:
        assert time.monotonic() < deadline, "the webhook's pods did not go away"
        time.sleep(1)
    try:
        yield cluster
    finally:
        set_failure_policy(cluster, "Fail")
        scale_webhook(cluster, 2)
        cluster.wait_programs()
        w.delete_namespace(cluster.kubectl, NS)


def test_fail_refuses_the_pod_with_the_reason(webhook_down: Cluster) -> None:
    set_failure_policy(webhook_down, "Fail")
    with pytest.raises(KubectlError) as refused:
        webhook_down.kubectl.apply(w.dump(w.pod("refused", NS, w.container("app"))))
    err = refused.value.stderr
    assert 'failed calling webhook "resources.resource-enforcer.dev"' in err, err
    out = webhook_down.kubectl.run("-n", NS, "get", "pod", "refused", check=False)
    assert "NotFound" in out.stderr


def test_ignore_admits_the_pod_and_the_enforcer_places_it_from_cri(webhook_down: Cluster) -> None:
    set_failure_policy(webhook_down, "Ignore")
    manifest = w.dump(w.pod("unannotated", NS, w.container("app", w.guaranteed("1"))))
    # The API server takes the changed configuration from its watch, a moment later.
    deadline = time.monotonic() + 60
    while webhook_down.kubectl.run("apply", "-f", "-", input=manifest, check=False).returncode:
        assert time.monotonic() < deadline, "the pod was still refused under Ignore"
        time.sleep(1)
    stored = w.wait_pod_running(webhook_down.kubectl, NS, "unannotated")
    assert ANNOTATION not in stored["metadata"].get("annotations", {})
    (c,) = truth.containers_of(webhook_down.kubectl, NS, "unannotated")
    assert CPUSet.parse(c.cpus) == ALL - RESERVED
    webhook_down.kubectl.run("-n", NS, "delete", "pod", "unannotated", "--wait=true", timeout=120)
