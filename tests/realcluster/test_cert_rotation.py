"""The webhook's serving certificate rotated on the real cluster as docs/webhook.md
("Certificate rotation") tells an operator, while `kubectl apply` of pods runs in a loop: a new
CA and certificate from `resource-webhook certs --new-ca`, the `caBundle` first holding the old
and the new CA, the new Secret applied, and once both webhook pods serve the new certificate
(read with curl and the new CA only), the `caBundle` left with the new CA alone. No admission
fails meanwhile: every pod is created, and stored with our annotation.

The looped pods carry a scheduling gate: admitted by the real API server through the webhook,
stored, never scheduled (the node runs nothing for them)."""

from __future__ import annotations

import base64
import json
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.cluster import workloads as w
from tests.support.cluster.bed import Cluster
from tests.support.cluster.kube import Kubectl

NS = "cert-rotation"
ANNOTATION = "resource-enforcer.dev/resources"
SERVICE_HOST = "resource-webhook.resource-enforcer.svc"
WEBHOOK_PODS = "app.kubernetes.io/name=resource-webhook"
GATE = "resource-enforcer.dev/never-scheduled"
# The webhook's certificate and the API server's caBundle; the pods are never scheduled, so
# the node's transport plays no part.
pytestmark = pytest.mark.one_mode


def held_pod(i: int) -> dict[str, Any]:
    pod = w.pod(f"rot-{i}", NS, w.container("app", w.burstable()))
    pod["spec"]["schedulingGates"] = [{"name": GATE}]
    return pod


def set_ca_bundle(kubectl: Kubectl, pem: bytes) -> None:
    value = base64.b64encode(pem).decode()
    patch = [{"op": "replace", "path": "/webhooks/0/clientConfig/caBundle", "value": value}]
    kubectl.run(
        "patch",
        "mutatingwebhookconfiguration",
        "resource-enforcer",
        "--type=json",
        "-p",
        json.dumps(patch),
    )


def served_with(kubectl: Kubectl, ca: Path) -> list[bool]:
    """For each webhook pod: whether it serves a certificate that `ca` alone verifies for the
    Service's name (curl --cacert, as docs/webhook.md checks it)."""
    pods = kubectl.json("-n", w.ENFORCER_NS, "get", "pods", "-l", WEBHOOK_PODS)["items"]
    answers = []
    for p in pods:
        ip = p["status"].get("podIP")
        if not ip:
            answers.append(False)
            continue
        out = subprocess.run(
            [
                "curl",
                "-sS",
                "--max-time",
                "10",
                "--cacert",
                str(ca),
                "--resolve",
                f"{SERVICE_HOST}:8443:{ip}",
                f"https://{SERVICE_HOST}:8443/healthz",
            ],
            capture_output=True,
            text=True,
            timeout=30,
        )
        answers.append(out.returncode == 0)
    return answers


class ApplyLoop(threading.Thread):
    """`kubectl apply` of one new pod after another until stopped; every outcome recorded."""

    def __init__(self, kubectl: Kubectl) -> None:
        super().__init__(daemon=True)
        self.kubectl = kubectl
        self.stop = threading.Event()
        self.applied: list[str] = []
        self.failures: list[str] = []

    def run(self) -> None:
        i = 0
        while not self.stop.is_set():
            out = self.kubectl.run("apply", "-f", "-", input=w.dump(held_pod(i)), check=False)
            if out.returncode == 0:
                self.applied.append(f"rot-{i}")
            else:
                self.failures.append(f"rot-{i}: {out.stderr.strip()}")
            i += 1
            time.sleep(0.5)


@pytest.fixture(scope="module")
def rotating(cluster: Cluster) -> Iterator[Cluster]:
    cluster.kubectl.apply(w.dump(w.namespace(NS)))
    yield cluster
    w.delete_namespace(cluster.kubectl, NS)


def test_rotating_the_certificate_fails_no_admission(rotating: Cluster, tmp_path: Path) -> None:
    kubectl = rotating.kubectl
    certs = rotating.lay.deploy / "certs"  # what the bed's deploy made (Step 2's `certs`)
    old_ca = (certs / "ca.crt").read_bytes()
    (tmp_path / "old-ca.crt").write_bytes(old_ca)
    assert all(served_with(kubectl, tmp_path / "old-ca.crt"))

    loop = ApplyLoop(kubectl)
    loop.start()
    try:
        w.wait_for("the first admissions", lambda: len(loop.applied) >= 3, 120)
        subprocess.run(
            [
                str(Path(sys.executable).parent / "resource-webhook"),
                "certs",
                "--new-ca",
                "--service",
                "resource-webhook",
                "--namespace",
                w.ENFORCER_NS,
                "--out",
                str(certs),
            ],
            check=True,
            capture_output=True,
            timeout=60,
        )
        new_ca = certs / "ca.crt"
        assert new_ca.read_bytes() != old_ca
        # docs/webhook.md: the caBundle holds both CAs before the new certificate is served.
        set_ca_bundle(kubectl, old_ca + new_ca.read_bytes())
        kubectl.run("apply", "-f", str(certs / "webhook-secret.yaml"))
        # kubelet refreshes the Secret's volume on its sync; the server reloads on a handshake.
        w.wait_for(
            "both webhook pods to serve the new certificate",
            lambda: (got := served_with(kubectl, new_ca)) and all(got),
            300,
        )
        set_ca_bundle(kubectl, new_ca.read_bytes())
        seen = len(loop.applied)
        w.wait_for("admissions under the new caBundle", lambda: len(loop.applied) >= seen + 5, 120)
    finally:
        loop.stop.set()
        loop.join(timeout=120)
    assert loop.failures == []
    assert not any(served_with(kubectl, tmp_path / "old-ca.crt"))
    stored = kubectl.json("-n", NS, "get", "pods")["items"]
    names = {p["metadata"]["name"] for p in stored}
    assert set(loop.applied) <= names
    unannotated = [
        p["metadata"]["name"]
        for p in stored
        if ANNOTATION not in p["metadata"].get("annotations", {})
    ]
    assert unannotated == [], f"admitted without our annotation: {unannotated}"
