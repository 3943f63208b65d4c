"""Over real TLS: `resource-webhook serve` started by its console script with certificates from
`resource-webhook certs`, driven with curl and httpx like the API server would drive it."""

from __future__ import annotations

import json
import socket
import ssl
import subprocess
from pathlib import Path
from typing import Any

import httpx
import pytest
from tls_clients import CURL, POSTERS, metric_value
from wh_support import (
    MALFORMED,
    RESOURCES_KEY,
    WebhookServer,
    annotation,
    apply,
    body,
    container,
    decode_patch,
    deployment_pod,
    pod,
    review,
)

pytestmark = pytest.mark.tls


def shapes() -> dict[str, tuple[dict[str, Any], dict[str, Any]]]:
    """Pods of real shape, with the annotation the webhook must leave on each."""
    app = {"requests": {"cpu": "2", "memory": "1Gi"}, "limits": {"cpu": "2", "memory": "1Gi"}}
    envoy = {
        "requests": {"cpu": "250m", "memory": "128Mi"},
        "limits": {"cpu": "500m", "memory": "256Mi"},
    }
    migrate = {"requests": {"cpu": "100m"}, "limits": {}}
    out = {
        "deployment pod": (
            deployment_pod(),
            # Burstable pod: the configured RDT class named Burstable is the default.
            {
                "containers": {
                    "app": {**app, "classes": {"rdt": "Burstable"}},
                    "envoy": {**envoy, "classes": {"rdt": "Burstable"}},
                },
                "initContainers": {"migrate": {**migrate, "classes": {"rdt": "Burstable"}}},
            },
        ),
        "no annotations": (
            pod([container("app", {"cpu": "1", "memory": "1Gi"}, {"cpu": "1", "memory": "1Gi"})]),
            {
                "containers": {
                    "app": {
                        "requests": {"cpu": "1", "memory": "1Gi"},
                        "limits": {"cpu": "1", "memory": "1Gi"},
                        "classes": {"rdt": "Guaranteed"},
                    }
                },
                "initContainers": {},
            },
        ),
        "init containers and sidecars": (
            pod(
                [container("app"), container("logger")],
                init_containers=[
                    container("setup", {"cpu": "100m"}),
                    container("mesh", {"cpu": "200m", "memory": "64Mi"}, restartPolicy="Always"),
                ],
                annotations={"blockioclass.resource-enforcer.dev/container.mesh": "throttled"},
            ),
            {
                "containers": {
                    "app": {"requests": {}, "limits": {}, "classes": {"rdt": "Burstable"}},
                    "logger": {"requests": {}, "limits": {}, "classes": {"rdt": "Burstable"}},
                },
                "initContainers": {
                    "setup": {
                        "requests": {"cpu": "100m"},
                        "limits": {},
                        "classes": {"rdt": "Burstable"},
                    },
                    "mesh": {
                        "requests": {"cpu": "200m", "memory": "64Mi"},
                        "limits": {},
                        "classes": {"rdt": "Burstable", "blockio": "throttled"},
                    },
                },
            },
        ),
        "spoofed annotation": (
            pod(
                [container("app")],
                annotations={
                    RESOURCES_KEY: json.dumps({"containers": {"app": {"classes": {"rdt": "gold"}}}})
                },
            ),
            {"containers": {"app": {"requests": {}, "limits": {}}}, "initContainers": {}},
        ),
    }
    dialects = {
        "rdt": [
            "rdtclass.resource-enforcer.dev/container.app",
            "rdtclass.resource-policy.nri.io/container.app",
            "rdtclass.cri-resource-manager.intel.com/container.app",
            "rdt.resources.beta.kubernetes.io/container.app",
            "rdtclass.resource-enforcer.dev/pod",
            "rdtclass.resource-policy.nri.io/pod",
            "rdtclass.cri-resource-manager.intel.com/pod",
            "rdt.resources.beta.kubernetes.io/pod",
        ],
        "blockio": [
            "blockioclass.resource-enforcer.dev/container.app",
            "blockioclass.resource-policy.nri.io/container.app",
            "blockioclass.cri-resource-manager.intel.com/container.app",
            "blockio.resources.beta.kubernetes.io/container.app",
            "blockioclass.resource-enforcer.dev/pod",
            "blockioclass.resource-policy.nri.io/pod",
            "blockioclass.cri-resource-manager.intel.com/pod",
            "blockio.resources.beta.kubernetes.io/pod",
        ],
    }
    for kind, keys in dialects.items():
        value = "silver" if kind == "rdt" else "throttled"
        for key in keys:
            out[f"dialect {key}"] = (
                pod([container("app")], annotations={key: value}),
                {
                    "containers": {"app": {"requests": {}, "limits": {}, "classes": {kind: value}}},
                    "initContainers": {},
                },
            )
    return out


SHAPES = shapes()


@pytest.mark.parametrize("client", POSTERS)
@pytest.mark.parametrize("shape", SHAPES)
def test_patch_decodes_to_the_expected_annotation(
    server: WebhookServer, certs: Path, client: str, shape: str
) -> None:
    obj, wanted = SHAPES[shape]
    r = review(obj)
    status, out = POSTERS[client](server, certs / "ca.crt", r, "/mutate")
    assert status == 200
    assert (
        out["apiVersion"] == "admission.k8s.io/v1" and out["response"]["uid"] == r["request"]["uid"]
    )
    patched = apply(obj, decode_patch(out))
    assert annotation(patched) == wanted
    # What the pod's author wrote next to it is kept; the rest of the pod is untouched.
    for key, value in (obj["metadata"].get("annotations") or {}).items():
        if key != RESOURCES_KEY:
            assert patched["metadata"]["annotations"][key] == value
    assert patched["spec"] == obj["spec"]


@pytest.mark.parametrize("client", POSTERS)
def test_v1beta1_and_root_path(server: WebhookServer, certs: Path, client: str) -> None:
    r = review(deployment_pod(), api_version="admission.k8s.io/v1beta1")
    status, out = POSTERS[client](server, certs / "ca.crt", r, "/")
    assert status == 200 and out["apiVersion"] == "admission.k8s.io/v1beta1"
    assert annotation(apply(r["request"]["object"], decode_patch(out)))["containers"]["app"]


@pytest.mark.parametrize("client", POSTERS)
def test_denial_over_tls(server: WebhookServer, certs: Path, client: str) -> None:
    p = pod(
        [container("app")],
        annotations={"rdtclass.resource-enforcer.dev/pod": "gold"},
        namespace="dev",
    )
    status, out = POSTERS[client](server, certs / "ca.crt", review(p, namespace="dev"), "/mutate")
    assert status == 200 and out["response"]["allowed"] is False
    assert out["response"]["status"]["code"] == 403
    message = out["response"]["status"]["message"]
    assert (
        "rdtclass.resource-enforcer.dev/pod" in message
        and '"gold"' in message
        and "prod-*" in message
    )


@pytest.mark.parametrize("client", POSTERS)
def test_forbidden_preference_is_denied_over_tls(
    server: WebhookServer, certs: Path, client: str
) -> None:
    key = "cpu.preserve.resource-enforcer.dev/container.app"
    p = pod([container("app")], annotations={key: "true"}, namespace="shop")
    status, out = POSTERS[client](server, certs / "ca.crt", review(p, namespace="shop"), "/mutate")
    assert status == 200 and out["response"]["allowed"] is False
    assert out["response"]["status"]["code"] == 403
    message = out["response"]["status"]["message"]
    assert f'"{key}"' in message and '"shop"' in message and "kube-system" in message
    # The same pod in a reserved namespace, and a declining one anywhere, are admitted.
    system = pod([container("app")], annotations={key: "true"}, namespace="kube-system")
    status, out = POSTERS[client](server, certs / "ca.crt", review(system, namespace="kube-system"))
    assert status == 200 and out["response"]["allowed"] is True
    declined = pod([container("app")], annotations={key: "false"}, namespace="shop")
    status, out = POSTERS[client](server, certs / "ca.crt", review(declined, namespace="shop"))
    assert status == 200 and out["response"]["allowed"] is True


def test_forbidden_preference_is_counted_and_logged(
    server: WebhookServer, client: httpx.Client
) -> None:
    series = 'resource_webhook_denials_total{reason="preference-forbidden"}'
    before = metric_value(client.get("/metrics").text, series)
    key = "prefer-isolated-cpus.resource-policy.nri.io/pod"
    p = pod([container("app")], annotations={key: "true"}, name="forbidden-pref", namespace="web")
    out = client.post("/mutate", content=body(review(p, namespace="web"))).json()
    assert (
        out["response"]["status"]["code"] == 403 and "rt-*" in out["response"]["status"]["message"]
    )
    assert metric_value(client.get("/metrics").text, series) == before + 1
    records = [r for r in server.log_records() if r.get("pod") == "forbidden-pref"]
    assert records and records[-1]["reason"] == "preference-forbidden"
    assert key in records[-1]["message"]


def test_without_config_any_well_formed_class_goes(plain_client: httpx.Client) -> None:
    p = pod([container("app")], annotations={"rdtclass.resource-enforcer.dev/pod": "platinum"})
    out = plain_client.post("/mutate", content=body(review(p))).json()
    assert annotation(apply(p, decode_patch(out)))["containers"]["app"]["classes"] == {
        "rdt": "platinum"
    }


def test_already_mutated_pod_comes_back_unchanged(client: httpx.Client) -> None:
    p = deployment_pod()
    once = apply(p, decode_patch(client.post("/mutate", content=body(review(p))).json()))
    again = client.post("/mutate", content=body(review(once, operation="UPDATE", old=once))).json()
    assert again["response"]["allowed"] is True and "patch" not in again["response"]


@pytest.mark.parametrize(("name", "raw", "message"), MALFORMED, ids=[m[0] for m in MALFORMED])
def test_malformed_bodies_get_400_with_the_field(
    client: httpx.Client, name: str, raw: bytes, message: str
) -> None:
    r = client.post("/mutate", content=raw, headers={"Content-Type": "application/json"})
    assert r.status_code == 400, r.text
    assert r.headers["content-type"] == "application/json"
    assert r.json()["error"].startswith(message)


def test_body_over_3_mib_declared_is_413(client: httpx.Client) -> None:
    r = client.post("/mutate", content=b" " * (3 * 1024 * 1024 + 1))
    assert r.status_code == 413 and "3 MiB" in r.json()["error"]


def test_body_over_3_mib_chunked_is_413(client: httpx.Client) -> None:
    r = client.post("/mutate", content=iter([b" " * (1024 * 1024)] * 4))
    assert r.status_code == 413


def test_body_over_3_mib_with_curl_expect_continue_is_413(
    server: WebhookServer, certs: Path, tmp_path: Path
) -> None:
    big = tmp_path / "big.json"
    big.write_bytes(b" " * (4 * 1024 * 1024))
    out = subprocess.run(
        [str(CURL), "-sS", "--cacert", str(certs / "ca.crt"), "--data-binary", f"@{big}",
         "-w", "\n%{http_code}", f"{server.url}/mutate"],
        capture_output=True, text=True, timeout=30,
    )  # fmt: skip
    text, status = out.stdout.rsplit("\n", 1)
    assert status == "413" and "3 MiB" in json.loads(text)["error"]


def test_bad_content_length_is_400(server: WebhookServer, tls_context: ssl.SSLContext) -> None:
    with (
        socket.create_connection(("127.0.0.1", server.port), timeout=10) as raw,
        tls_context.wrap_socket(raw, server_hostname="localhost") as tls,
    ):
        tls.sendall(b"POST /mutate HTTP/1.1\r\nHost: localhost\r\nContent-Length: 12x\r\n\r\n{}")
        answer = tls.recv(65536)
    assert answer.startswith(b"HTTP/1.1 400")  # h11 refuses it before the app sees it


def test_request_head_over_16_kib_is_431_and_closed(
    server: WebhookServer, tls_context: ssl.SSLContext
) -> None:
    """httptools keeps a header line in memory until it ends: the head is bounded in bytes."""
    with (
        socket.create_connection(("127.0.0.1", server.port), timeout=10) as raw,
        tls_context.wrap_socket(raw, server_hostname="localhost") as tls,
    ):
        tls.sendall(b"POST /mutate HTTP/1.1\r\nHost: localhost\r\nX-Pad: ")
        for _ in range(8):
            tls.sendall(b"a" * 4096)  # one header line that never ends
        answer = b""
        while chunk := tls.recv(65536):
            answer += chunk
    assert answer.startswith(b"HTTP/1.1 431")


@pytest.mark.parametrize(
    ("method", "path", "status"),
    [("GET", "/mutate", 405), ("GET", "/nope", 404), ("DELETE", "/", 405)],
)
def test_wrong_method_or_path(client: httpx.Client, method: str, path: str, status: int) -> None:
    assert client.request(method, path).status_code == status


def test_probes_and_metrics(client: httpx.Client) -> None:
    assert client.get("/healthz").status_code == 200
    assert client.get("/readyz").status_code == 200
    metrics = client.get("/metrics")
    assert metrics.headers["content-type"].startswith("text/plain")
    assert "resource_webhook_request_duration_seconds_bucket" in metrics.text


def test_metrics_change(client: httpx.Client) -> None:
    series = [
        'resource_webhook_requests_total{outcome="patched"}',
        'resource_webhook_requests_total{outcome="denied"}',
        'resource_webhook_requests_total{outcome="invalid"}',
        'resource_webhook_requests_total{outcome="ignored"}',
        'resource_webhook_denials_total{reason="forbidden"}',
        'resource_webhook_denials_total{reason="preference"}',
        "resource_webhook_request_duration_seconds_count",
    ]
    before = client.get("/metrics").text
    client.post("/mutate", content=body(review(deployment_pod(name="m-1", generate_name=None))))
    forbidden = pod(
        [container("a")], annotations={"blockioclass.resource-enforcer.dev/pod": "fast"}
    )
    client.post("/mutate", content=body(review(forbidden)))
    bad_pref = pod([container("a")], annotations={"cpu.preserve.resource-enforcer.dev/pod": "1"})
    client.post("/mutate", content=body(review(bad_pref)))
    client.post("/mutate", content=b"{")
    client.post("/mutate", content=body(review(None, operation="DELETE")))
    after = client.get("/metrics").text
    deltas = [metric_value(after, s) - metric_value(before, s) for s in series]
    assert deltas == [1, 2, 1, 1, 1, 1, 5]


def test_logs_carry_uid_namespace_and_pod(server: WebhookServer, client: httpx.Client) -> None:
    p = pod(
        [container("app")],
        annotations={"rdtclass.resource-enforcer.dev/pod": "ünicode"},
        name="web-42",
    )
    client.post("/mutate", content=body(review(p, uid="uid-log-test", namespace="shop")))
    client.post("/mutate", content=body(review(deployment_pod(), uid="uid-log-ok")))
    records = server.log_records()
    denied = next(r for r in records if r.get("uid") == "uid-log-test")
    assert (denied["namespace"], denied["pod"], denied["outcome"]) == ("shop", "web-42", "denied")
    patched = next(r for r in records if r.get("uid") == "uid-log-ok")  # --log-level debug
    assert patched["outcome"] == "patched" and patched["pod"] == "web-7d4b9c8f6d-*"
