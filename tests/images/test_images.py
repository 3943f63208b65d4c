"""The images as a user runs them: each answers --version, holds its own program and nothing of
the other's, the webhook serves over TLS from inside its container, the enforcer checks the
example configurations and plans as the package does."""

from __future__ import annotations

import base64
import json
import os
import socket
import subprocess
import sys
import time
import tomllib
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jsonpatch
import pytest
import yaml
from img_support import ROOT, Image, container, podman, python_in, run_in

pytestmark = pytest.mark.images

VERSION = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]

# The distribution's top-level packages in each image: its own program and the shared packages
# (the contract and its file I/O).
SHARED = {"resource_contract", "resource_files"}
OWN = {"webhook": {"webhook", *SHARED}, "enforcer": {"enforcer", *SHARED}}
OTHER = {"webhook": "enforcer", "enforcer": "webhook"}
# Third-party packages that must stay out: the other program's stack, and the test tools.
LEFT_OUT = {
    "webhook": {"grpcio", "protobuf", "hyperframe", "hpack"},
    "enforcer": {"fastapi", "uvicorn", "starlette", "cryptography"},
}
TEST_TOOLS = {"pytest", "hypothesis", "httpx", "jsonpatch", "grpcio-tools", "ruff"}

INSPECT = """
import importlib.metadata as md, importlib.util, json, shutil
dist = md.distribution("kube-resource-enforcer")
files = [f for f in dist.files if f.parts[0] != ".." and not f.parts[0].endswith(".dist-info")]
print(json.dumps({
    "packages": sorted({f.parts[0] for f in files}),
    "modules": sorted(f.as_posix() for f in files if f.suffix == ".py"),
    "importable": {n: importlib.util.find_spec(n) is not None
                   for n in ("webhook", "enforcer", "resource_contract", "resource_files")},
    "scripts": {s: shutil.which(s) for s in ("resource-webhook", "resource-enforcer")},
    "distributions": sorted({d.metadata["Name"].lower().replace("_", "-")
                             for d in md.distributions()}),
}))
"""

IMPORT_ALL = """
import importlib, json, pkgutil, sys
count, failed = 0, {}
for top in sys.argv[1:]:
    for m in pkgutil.walk_packages(importlib.import_module(top).__path__, top + "."):
        count += 1
        try:
            importlib.import_module(m.name)
        except Exception as e:
            failed[m.name] = f"{type(e).__name__}: {e}"
print(json.dumps({"count": count, "failed": failed}))
"""


def test_version(image: Image) -> None:
    out = run_in(image, "--version")
    assert out.returncode == 0, out.stderr
    assert out.stdout == f"{image.program} {VERSION}\n"


def test_image_holds_only_its_own_program(image: Image) -> None:
    out = python_in(image, INSPECT)
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout)
    assert set(got["packages"]) == OWN[image.name]
    assert got["importable"] == {
        image.name: True,
        OTHER[image.name]: False,
        "resource_contract": True,
        "resource_files": True,
    }
    # Its console script and no other (the other's, without its package, would only crash).
    assert got["scripts"][image.program] == f"/opt/venv/bin/{image.program}"
    assert got["scripts"][f"resource-{OTHER[image.name]}"] is None
    assert not (set(got["distributions"]) & (LEFT_OUT[image.name] | TEST_TOOLS))
    # The test and demo tooling (kubelet emulator, private containerd, demo) is not shipped.
    tooling = [
        m
        for m in got["modules"]
        if {"devenv", "emulator"} & set(m.split("/")) or m.endswith("demo.py")
    ]
    assert tooling == []


def test_every_module_of_the_program_imports(image: Image) -> None:
    """Nothing in the image needs a package the image does not have."""
    out = python_in(image, IMPORT_ALL.replace("sys.argv[1:]", repr(sorted(OWN[image.name]))))
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout)
    assert got["failed"] == {}
    assert got["count"] > 0


# --- the webhook --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Served:
    name: str  # the container
    port: int  # on 127.0.0.1, published to the container's 8443
    ca: Path


def _config(image: Image) -> dict[str, Any]:
    out = podman("image", "inspect", "--format", "{{json .Config}}", image.ref)
    return json.loads(out.stdout)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def curl(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["curl", "-sS", "--max-time", "10", *args],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )


@pytest.fixture(scope="module")
def served(webhook_image: Image, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    """The image's own command (ENTRYPOINT + CMD, as the Deployment runs it), its port
    published, the certificates from the image's `resource-webhook certs` where CMD reads them."""
    config = _config(webhook_image)
    uid, _, gid = config["User"].partition(":")
    cmd = config["Cmd"]
    tls_dir = Path(cmd[cmd.index("--tls-cert") + 1]).parent
    assert Path(cmd[cmd.index("--tls-key") + 1]).parent == tls_dir
    assert "8443/tcp" in config["ExposedPorts"]

    certs = tmp_path_factory.mktemp("webhook-certs")
    os.chown(certs, int(uid), int(gid))  # written by the image's non-root user
    out = run_in(
        webhook_image,
        "certs",
        "--service=resource-webhook",
        "--namespace=resource-enforcer",
        "--out=/certs",
        options=("--volume", f"{certs}:/certs"),
    )
    assert out.returncode == 0, out.stderr
    assert {"ca.crt", "tls.crt", "tls.key"} <= {p.name for p in certs.iterdir()}

    port = _free_port()
    options = ("--publish", f"127.0.0.1:{port}:8443", "--volume", f"{certs}:{tls_dir}:ro")
    with container(webhook_image, options=options) as name:
        deadline = time.monotonic() + 60
        while curl(
            "--cacert", str(certs / "ca.crt"), f"https://localhost:{port}/healthz"
        ).returncode:
            running = podman("inspect", "--format", "{{.State.Running}}", name).stdout.strip()
            if running != "true" or time.monotonic() > deadline:
                logs = podman("logs", name, check=False)
                pytest.fail(f"the webhook did not serve:\n{logs.stdout}{logs.stderr}")
            time.sleep(0.5)
        yield Served(name, port, certs / "ca.crt")


def test_webhook_serves_healthz_over_tls(served: Served) -> None:
    url = f"https://localhost:{served.port}/healthz"
    out = curl("--cacert", str(served.ca), "-o", "/dev/null", "-w", "%{http_code}", url)
    assert (out.returncode, out.stdout) == (0, "200"), out.stderr
    # TLS with the certificate `certs` made, not any: without its CA the client refuses it.
    refused = curl("-o", "/dev/null", url)
    assert refused.returncode == 60, refused.stderr  # curl: peer certificate cannot be verified


def test_webhook_image_healthcheck_passes(served: Served) -> None:
    out = podman("healthcheck", "run", served.name, check=False)
    assert out.returncode == 0, out.stdout + out.stderr
    status = podman("inspect", "--format", "{{.State.Health.Status}}", served.name).stdout
    assert status.strip() == "healthy"


def test_webhook_in_the_image_annotates_a_pod(served: Served, tmp_path: Path) -> None:
    resources = {"requests": {"cpu": "2", "memory": "1Gi"}, "limits": {"cpu": "2", "memory": "1Gi"}}
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "web", "namespace": "shop"},
        "spec": {"containers": [{"name": "app", "image": "app:1", "resources": resources}]},
    }
    uid = str(uuid.uuid4())
    kind = {"group": "", "version": "v1", "kind": "Pod"}
    review = {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": uid,
            "kind": kind,
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "operation": "CREATE",
            "namespace": "shop",
            "userInfo": {"username": "kubernetes-admin"},
            "object": pod,
        },
    }
    body = tmp_path / "review.json"
    body.write_text(json.dumps(review))
    out = curl(
        "--cacert",
        str(served.ca),
        "-H",
        "Content-Type: application/json",
        "--data-binary",
        f"@{body}",
        f"https://localhost:{served.port}/mutate",
    )
    assert out.returncode == 0, out.stderr
    response = json.loads(out.stdout)["response"]
    assert response["uid"] == uid and response["allowed"] is True
    patch = json.loads(base64.b64decode(response["patch"]))
    mutated = jsonpatch.apply_patch(pod, patch)
    annotation = json.loads(mutated["metadata"]["annotations"]["resource-enforcer.dev/resources"])
    assert annotation == {"containers": {"app": resources}, "initContainers": {}}


# --- the enforcer -------------------------------------------------------------------------------


def _example_configs() -> dict[str, str]:
    """deploy/enforcer's ConfigMaps (kustomized and examples): file -> their config.yaml."""
    out = {}
    for path in sorted((ROOT / "deploy" / "enforcer").rglob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if doc and doc.get("kind") == "ConfigMap" and "config.yaml" in doc.get("data", {}):
                out[path.relative_to(ROOT).as_posix()] = doc["data"]["config.yaml"]
    return out


EXAMPLES = _example_configs()


def test_there_are_example_configmaps() -> None:
    assert len(EXAMPLES) >= 2


@pytest.mark.parametrize("example", sorted(EXAMPLES))
def test_enforcer_image_accepts_the_example_configmaps(
    enforcer_image: Image, example: str, tmp_path: Path
) -> None:
    (tmp_path / "config.yaml").write_text(EXAMPLES[example])
    out = run_in(
        enforcer_image,
        "check-config",
        "/config/config.yaml",
        options=("--volume", f"{tmp_path}:/config:ro"),
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.stdout == "/config/config.yaml: valid\n"


def test_enforcer_image_refuses_a_bad_configuration(enforcer_image: Image, tmp_path: Path) -> None:
    (tmp_path / "config.yaml").write_text("policy:\n  name: static\n  reservedCPU: 2\n")
    out = run_in(
        enforcer_image,
        "check-config",
        "/config/config.yaml",
        options=("--volume", f"{tmp_path}:/config:ro"),
    )
    assert out.returncode == 1
    assert out.stdout.startswith("policy.reservedCPU: ")


def test_enforcer_image_plans_as_the_package_does(
    enforcer_image: Image, snapshot_roots: dict[str, Path], tmp_path: Path
) -> None:
    """`resource-enforcer plan` in the image gives the placement the source tree gives."""
    (tmp_path / "config.yaml").write_text(EXAMPLES["deploy/enforcer/examples/configmap-node.yaml"])
    pods = []
    for name, cpu in (("db", "4"), ("web", "500m")):
        res = {"cpu": cpu, "memory": "1Gi"}
        pods.append(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": name, "namespace": "shop"},
                "spec": {
                    "containers": [
                        {
                            "name": "app",
                            "image": "app",
                            "resources": {"requests": res, "limits": res},
                        }
                    ]
                },
            }
        )
    (tmp_path / "pods.yaml").write_text(yaml.safe_dump_all(pods))
    sysfs = snapshot_roots["server"]

    def plan(work: Path | str, sysfs: Path | str) -> list[str]:
        return [
            "plan",
            f"--config={work}/config.yaml",
            f"--sysfs-root={sysfs}",
            f"--pods={work}/pods.yaml",
        ]

    in_image = run_in(
        enforcer_image,
        *plan("/work", "/sysfs"),
        options=("--volume", f"{tmp_path}:/work:ro", "--volume", f"{sysfs}:/sysfs:ro"),
    )
    here = subprocess.run(
        [sys.executable, "-m", "enforcer.cli", *plan(tmp_path, sysfs)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
        check=False,
    )
    assert here.returncode == 0, here.stderr
    assert in_image.returncode == 0, in_image.stderr
    placed = json.loads(in_image.stdout)
    assert [(p["pod"], p["error"]) for p in placed] == [("db", None), ("web", None)]
    assert placed[0]["exclusiveCPUs"]
    assert placed == json.loads(here.stdout)
