"""Builders for AdmissionReviews of real Kubernetes shape, and a real webhook server process."""

from __future__ import annotations

import base64
import contextlib
import copy
import json
import re
import signal
import ssl
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import jsonpatch

RESOURCES_KEY = "resource-enforcer.dev/resources"
POD_KIND = {"group": "", "version": "v1", "kind": "Pod"}
PODS = {"group": "", "version": "v1", "resource": "pods"}
BIN = Path(sys.executable).parent

# The enforcer's configuration as the tests' webhook sees it: RDT gold/silver plus classes
# named after two QoS classes, block I/O throttled/fast, gold and fast limited by namespace;
# isolated CPUs only for rt-* namespaces, cpu.preserve and prefer-reserved-cpus by default only
# for the reserved namespaces (kube-system).
CONFIG_YAML = """\
rdt:
  partitions:
    default:
      l3Allocation: "100%"
      classes:
        gold: {l3Allocation: "60%"}
        silver: {l3Allocation: "30%"}
        Guaranteed: {l3Allocation: "100%"}
        Burstable: {l3Allocation: "50%"}
blockio:
  Classes:
    throttled:
    - Weight: 100
    fast:
    - Weight: 800
classAccess:
  rdt:
    gold: ["prod-*", "shop"]
  blockio:
    fast: ["prod-*"]
preferenceAccess:
  prefer-isolated-cpus: ["rt-*"]
"""


def make_certs(out: Path) -> Path:
    """A CA and serving certificate written by `resource-webhook certs`, as users make them."""
    subprocess.run(
        [str(BIN / "resource-webhook"), "certs", "--service", "resource-webhook",
         "--namespace", "resource-enforcer", "--out", str(out)],
        check=True,
        capture_output=True,
    )  # fmt: skip
    return out


def container(
    name: str,
    requests: dict[str, Any] | None = None,
    limits: dict[str, Any] | None = None,
    **extra: Any,
) -> dict[str, Any]:
    c: dict[str, Any] = {
        "name": name,
        "image": f"registry.example/{name}:1.0",
        "terminationMessagePath": "/dev/termination-log",
        "terminationMessagePolicy": "File",
        "imagePullPolicy": "IfNotPresent",
    }
    resources: dict[str, Any] = {}
    if requests is not None:
        resources["requests"] = requests
    if limits is not None:
        resources["limits"] = limits
    c["resources"] = resources  # the API server always writes `resources`, maybe empty
    c.update(extra)
    return c


def pod(
    containers: list[dict[str, Any]],
    *,
    init_containers: list[dict[str, Any]] | None = None,
    annotations: dict[str, str] | None = None,
    name: str | None = None,
    generate_name: str | None = "web-7d4b9c8f6d-",
    namespace: str = "shop",
    labels: dict[str, str] | None = None,
) -> dict[str, Any]:
    metadata: dict[str, Any] = {"namespace": namespace, "creationTimestamp": None}
    if name:
        metadata["name"] = name
    elif generate_name:
        metadata["generateName"] = generate_name
    metadata["labels"] = labels or {"app": "web"}
    if annotations is not None:
        metadata["annotations"] = annotations
    spec: dict[str, Any] = {
        "volumes": [{"name": "kube-api-access", "projected": {"defaultMode": 420, "sources": []}}],
        "containers": containers,
        "restartPolicy": "Always",
        "terminationGracePeriodSeconds": 30,
        "dnsPolicy": "ClusterFirst",
        "serviceAccountName": "default",
        "securityContext": {},
        "schedulerName": "default-scheduler",
        "enableServiceLinks": True,
    }
    if init_containers is not None:
        spec["initContainers"] = init_containers
    return {"kind": "Pod", "apiVersion": "v1", "metadata": metadata, "spec": spec, "status": {}}


def deployment_pod(**kw: Any) -> dict[str, Any]:
    """A pod as a Deployment's ReplicaSet creates it: generateName, owner, managed fields."""
    p = pod(
        [
            container(
                "app",
                {"cpu": "2", "memory": "1Gi"},
                {"cpu": "2", "memory": "1Gi"},
                ports=[{"containerPort": 8080, "protocol": "TCP"}],
            ),
            container(
                "envoy", {"cpu": "250m", "memory": "128Mi"}, {"cpu": "500m", "memory": "256Mi"}
            ),
        ],
        init_containers=[container("migrate", {"cpu": "100m"})],
        labels={"app": "web", "pod-template-hash": "7d4b9c8f6d"},
        **kw,
    )
    p["metadata"]["ownerReferences"] = [
        {
            "apiVersion": "apps/v1",
            "kind": "ReplicaSet",
            "name": "web-7d4b9c8f6d",
            "uid": "4c0a9a3e-96a7-4d38-8a9f-7b8f1f2f9c11",
            "controller": True,
            "blockOwnerDeletion": True,
        }
    ]
    p["metadata"]["managedFields"] = [
        {
            "manager": "kube-controller-manager",
            "operation": "Update",
            "apiVersion": "v1",
            "time": "2026-11-20T10:00:01Z",
            "fieldsType": "FieldsV1",
            "fieldsV1": {"f:metadata": {"f:generateName": {}}, "f:spec": {"f:containers": {}}},
        }
    ]
    return p


def review(
    obj: Any,
    *,
    operation: str = "CREATE",
    kind: dict[str, str] | None = None,
    resource: dict[str, str] | None = None,
    namespace: str | None = "shop",
    uid: str | None = None,
    api_version: str = "admission.k8s.io/v1",
    sub_resource: str | None = None,
    old: Any = None,
    name: str | None = None,
) -> dict[str, Any]:
    kind, resource = kind or POD_KIND, resource or PODS
    request: dict[str, Any] = {  # copies: callers may change the review they get
        "uid": uid or str(uuid.uuid4()),
        "kind": dict(kind),
        "resource": dict(resource),
        "requestKind": dict(kind),
        "requestResource": dict(resource),
        "operation": operation,
        "userInfo": {"username": "kubernetes-admin", "groups": ["system:masters"]},
        "object": obj,
        "oldObject": old,
        "dryRun": False,
        "options": {"kind": "CreateOptions", "apiVersion": "meta.k8s.io/v1"},
    }
    if namespace is not None:
        request["namespace"] = namespace
    if sub_resource:
        request["subResource"] = sub_resource
    if name:
        request["name"] = name
    return {"apiVersion": api_version, "kind": "AdmissionReview", "request": request}


def decode_patch(answer: dict[str, Any]) -> list[dict[str, Any]]:
    response = answer["response"]
    if "patch" not in response:
        return []
    assert response["patchType"] == "JSONPatch"
    return json.loads(base64.b64decode(response["patch"]))


def apply(obj: dict[str, Any], patch: list[dict[str, Any]]) -> dict[str, Any]:
    return jsonpatch.apply_patch(copy.deepcopy(obj), patch)


def annotation(obj: dict[str, Any]) -> dict[str, Any]:
    return json.loads(obj["metadata"]["annotations"][RESOURCES_KEY])


def patched_annotation(obj: dict[str, Any], answer: dict[str, Any]) -> dict[str, Any]:
    return annotation(apply(obj, decode_patch(answer)))


def body(obj: Any) -> bytes:
    return json.dumps(obj).encode()


# --- bodies that are not AdmissionReviews, with the start of the 400's message -------------

GOOD = review(deployment_pod(), uid="u-1")


def with_field(path: str, value: Any) -> dict[str, Any]:
    """A copy of GOOD with the field at dotted `path` set to `value` (or deleted)."""
    out = json.loads(json.dumps(GOOD))
    target = out
    parts = path.split(".")
    for part in parts[:-1]:
        target = target[int(part)] if isinstance(target, list) else target[part]
    if value is _DELETE:
        del target[parts[-1]]
    elif isinstance(target, list):
        target[int(parts[-1])] = value
    else:
        target[parts[-1]] = value
    return out


_DELETE = object()

MALFORMED: list[tuple[str, bytes, str]] = [
    ("empty body", b"", "body: empty"),
    ("whitespace", b"  \n", "body: empty"),
    ("not json", b"kind: AdmissionReview", "body: not valid JSON"),
    ("truncated json", body(GOOD)[:-5], "body: not valid JSON"),
    ("invalid utf-8", b'{"apiVersion": "\xff"}', "body: not valid JSON"),
    ("deep nesting", b"[" * 100000 + b"]" * 100000, "body: not valid JSON"),
    ("json array", b"[]", "body: must be a JSON object"),
    ("json string", b'"AdmissionReview"', "body: must be a JSON object"),
    ("json null", b"null", "body: must be a JSON object"),
    ("no apiVersion", body(with_field("apiVersion", _DELETE)), "apiVersion: field required"),
    (
        "wrong apiVersion",
        body(with_field("apiVersion", "admission.k8s.io/v2")),
        "apiVersion: input should be",
    ),
    ("wrong kind", body(with_field("kind", "Pod")), "kind: input should be 'AdmissionReview'"),
    ("no request", body(with_field("request", _DELETE)), "request: field required"),
    ("null request", body(with_field("request", None)), "request: must be an object"),
    ("no uid", body(with_field("request.uid", _DELETE)), "request.uid: field required"),
    ("empty uid", body(with_field("request.uid", "")), "request.uid: must not be empty"),
    ("numeric uid", body(with_field("request.uid", 42)), "request.uid: must be a string"),
    (
        "kind not an object",
        body(with_field("request.kind", "Pod")),
        "request.kind: must be an object",
    ),
    (
        "no resource",
        body(with_field("request.resource", _DELETE)),
        "request.resource: field required",
    ),
    (
        "unknown operation",
        body(with_field("request.operation", "PATCH")),
        "request.operation: input should be",
    ),
    (
        "namespace a number",
        body(with_field("request.namespace", 7)),
        "request.namespace: must be a string",
    ),
    (
        "pod object null",
        body(with_field("request.object", None)),
        "request.object: must be an object",
    ),
    (
        "pod object a list",
        body(with_field("request.object", [])),
        "request.object: must be an object",
    ),
    (
        "pod without spec",
        body(with_field("request.object.spec", _DELETE)),
        "request.object.spec: field required",
    ),
    (
        "containers not a list",
        body(with_field("request.object.spec.containers", {"app": {}})),
        "request.object.spec.containers: must be an array",
    ),
    (
        "container without name",
        body(with_field("request.object.spec.containers.0.name", _DELETE)),
        "request.object.spec.containers[0].name: field required",
    ),
    (
        "quantity a boolean",
        body(with_field("request.object.spec.containers.1.resources.requests.cpu", True)),
        "request.object.spec.containers[1].resources.requests.cpu: "
        "a quantity must be a string or a number",
    ),
    (
        "quantity NaN",
        body(GOOD).replace(b'"cpu": "250m"', b'"cpu": NaN'),
        "request.object.spec.containers[1].resources.requests.cpu: "
        "a quantity must be a finite number",
    ),
    (
        "annotation value a number",
        body(with_field("request.object.metadata.annotations", {"a": 1})),
        "request.object.metadata.annotations.a: must be a string",
    ),
    (
        "init containers not a list",
        body(with_field("request.object.spec.initContainers", "setup")),
        "request.object.spec.initContainers: must be an array",
    ),
]


class WebhookServer:
    """`resource-webhook serve` started as a user would: the console script, real files,
    a port chosen by the kernel (read back from the log), stopped with SIGTERM."""

    def __init__(self, workdir: Path, cert: Path, key: Path, *args: str) -> None:
        self.log_path = workdir / f"webhook-{uuid.uuid4().hex[:6]}.log"
        self.cert, self.key = cert, key
        exe = BIN / "resource-webhook"
        assert exe.exists(), f"{exe} missing: install the project (pip install -e .)"
        cmd = [str(exe), "serve", "--tls-cert", str(cert), "--tls-key", str(key)]
        cmd += ["--host", "127.0.0.1", "--port", "0", *args]
        self._log = self.log_path.open("wb")
        self.process = subprocess.Popen(cmd, stdout=self._log, stderr=subprocess.STDOUT)
        self.port = self._wait_for_port()

    def log(self) -> str:
        return self.log_path.read_text()

    def log_records(self) -> list[dict[str, Any]]:
        out = []
        for line in self.log().splitlines():
            with contextlib.suppress(ValueError):  # a line some library printed
                out.append(json.loads(line))
        return out

    def _wait_for_port(self) -> int:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise AssertionError(f"server exited {self.process.returncode}:\n{self.log()}")
            # JSON lines (the default) or text (--log-format text).
            match = re.search(
                r'"msg": "serving".*?"port": (\d+)|: serving .*?port=(\d+)', self.log()
            )
            if match:
                return int(match.group(1) or match.group(2))
            time.sleep(0.05)
        self.stop()
        raise AssertionError(f"server did not start:\n{self.log()}")

    @property
    def url(self) -> str:
        return f"https://localhost:{self.port}"

    def wait_ready(self, ca: Path, timeout: float = 30) -> None:
        """Polls /healthz over verified TLS until it answers."""
        import httpx

        ctx = ssl.create_default_context(cafile=str(ca))
        deadline = time.monotonic() + timeout
        last: Exception | None = None
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise AssertionError(f"server exited {self.process.returncode}:\n{self.log()}")
            try:
                if httpx.get(f"{self.url}/healthz", verify=ctx, timeout=2).status_code == 200:
                    return
            except httpx.HTTPError as exc:
                last = exc
            time.sleep(0.05)
        raise AssertionError(f"server not ready ({last}):\n{self.log()}")

    def stop(self, timeout: float = 15) -> int:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self._log.close()
        return self.process.returncode
