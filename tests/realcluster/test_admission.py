"""Admission by the real API server: it calls the webhook (TLS, caBundle, the Service reached
through its endpoints), applies our JSON patch to Pods created directly and by the Deployment
and DaemonSet controllers, and turns a refusal into kubectl's error with our message."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import pytest

from tests.support.cluster import workloads as w
from tests.support.cluster.bed import Cluster
from tests.support.cluster.kube import KubectlError

NS = "admission"
ANNOTATION = "resource-enforcer.dev/resources"
# The API server and the webhook, with no node in between: the same on either transport.
pytestmark = pytest.mark.one_mode


@pytest.fixture(scope="module")
def ns(cluster: Cluster) -> Iterator[str]:
    cluster.kubectl.apply(w.dump(w.namespace(NS)))
    yield NS
    w.delete_namespace(cluster.kubectl, NS)


def stored_resources(p: dict[str, Any]) -> dict[str, Any]:
    raw = p["metadata"].get("annotations", {}).get(ANNOTATION)
    assert raw, f"pod {p['metadata']['name']} was stored without {ANNOTATION}"
    return json.loads(raw)


def pods_of(cluster: Cluster, app: str, timeout: float = 90) -> list[dict[str, Any]]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        items = cluster.kubectl.json("-n", NS, "get", "pods", "-l", f"app={app}")["items"]
        if items:
            return list(items)
        time.sleep(1)
    raise AssertionError(f"no pod of {app} was created in {timeout} s")


def test_a_pod_is_stored_with_the_annotation(cluster: Cluster, ns: str) -> None:
    manifest = w.pod("direct", ns, w.container("app", w.guaranteed("500m", "48Mi")))
    # The author's own value is never trusted: the webhook overwrites it.
    manifest["metadata"]["annotations"] = {ANNOTATION: '{"containers": {}}'}
    cluster.kubectl.apply(w.dump(manifest))
    stored = cluster.kubectl.json("-n", ns, "get", "pod", "direct")
    assert stored_resources(stored) == {
        "containers": {
            "app": {
                "requests": {"cpu": "500m", "memory": "48Mi"},
                "limits": {"cpu": "500m", "memory": "48Mi"},
            }
        },
        "initContainers": {},
    }


@pytest.mark.parametrize("kind", ["Deployment", "DaemonSet"])
def test_pods_of_controllers_are_stored_with_the_annotation(
    cluster: Cluster, ns: str, kind: str
) -> None:
    app = f"by-{kind.lower()}"
    cluster.kubectl.apply(
        w.dump(w.workload(kind, app, ns, w.container("main", w.burstable("50m", "16Mi"))))
    )
    for p in pods_of(cluster, app):
        assert stored_resources(p)["containers"] == {
            "main": {"requests": {"cpu": "50m", "memory": "16Mi"}, "limits": {}}
        }


def test_a_refused_class_is_a_kubectl_error_with_our_message(cluster: Cluster, ns: str) -> None:
    key = "rdtclass.resource-enforcer.dev/container.app"
    manifest = w.pod("bad-class", ns, w.container("app"), annotations={key: "-not a name"})
    with pytest.raises(KubectlError) as refused:
        cluster.kubectl.apply(w.dump(manifest))
    err = refused.value.stderr
    assert 'admission webhook "resources.resource-enforcer.dev" denied the request' in err, err
    assert key in err and "-not a name" in err, err
    out = cluster.kubectl.run("-n", ns, "get", "pod", "bad-class", check=False)
    assert out.returncode != 0 and "NotFound" in out.stderr
