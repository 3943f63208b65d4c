"""Our two programs on the cluster, from the images `make test` builds.

The images are built by tests/images' own code (podman, the Debian base of .ci/base-image.sh),
saved and put into the cluster's runtime (tests/support/cluster/runtime.py), then deployed
with `deploy/` and kubectl as docs/install.md and docs/webhook.md tell an operator: the
webhook's certificates from `resource-webhook certs`, `kubectl apply -k`, the Secret, the
`caBundle` patch. The only difference is a kustomize overlay of the test bed's own
(``.cluster/deploy/overlay``): the images' local names, and the node-local paths of the private
runtime (its socket, the NRI socket, the relay socket and the enforcer's state folder), each
mounted at the same path inside the pod as on the host so the relay's fallback link points where
kubelet can follow it.
"""

from __future__ import annotations

import base64
import copy
import json
import os
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any

import yaml

from tests.support.cluster.kube import Kubectl
from tests.support.cluster.layout import PAUSE_IMAGE, REPO, Layout

NRT_COMPONENT = REPO / "deploy" / "components" / "node-resource-topology"
IMAGE_REPO = "localhost/kube-resource-enforcer"
IMAGES = {"webhook": f"{IMAGE_REPO}/webhook:test", "enforcer": f"{IMAGE_REPO}/enforcer:test"}


def _run(argv: list[str], timeout: float = 600) -> str:
    out = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
    if out.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} exited {out.returncode}:\n{out.stderr[-3000:]}")
    return out.stdout


# The images built by this process: a test session's second cluster imports the same ones
# (the sources do not change under a running session), without a second round of builds.
_built: dict[str, str] = {}


def build_images() -> dict[str, str]:
    """Both images, built by tests/images' code on the Debian base; name -> reference. Built
    once per process, again only if one of them is gone from podman's store."""
    from tests.images.img_support import build  # the one image build of the project

    if not _built or not all(_image_exists(ref) for ref in _built.values()):
        base = _run([str(REPO / ".ci" / "base-image.sh")], timeout=1800).strip().splitlines()[-1]
        _built.clear()
        _built.update({name: build(name, base).ref for name in ("webhook", "enforcer")})
    return dict(_built)


def _image_exists(ref: str) -> bool:
    return subprocess.run(["podman", "image", "exists", ref], timeout=60).returncode == 0


def build_pause_image(pause_bin: Path) -> str:
    """The pod sandbox image: Kubernetes' own pause program (built static by build.sh)."""
    with tempfile.TemporaryDirectory(prefix="kre-pause-") as ctx:
        shutil.copy2(pause_bin / "pause", Path(ctx) / "pause")
        (Path(ctx) / "Containerfile").write_text(
            'FROM scratch\nCOPY pause /pause\nUSER 65535:65535\nENTRYPOINT ["/pause"]\n'
        )
        _run(["podman", "build", "--format=docker", f"--tag={PAUSE_IMAGE}", ctx])
    return PAUSE_IMAGE


def _host_paths(lay: Layout) -> dict[str, str]:
    """Paths of a real node (deploy/'s defaults) -> the test bed's private ones."""
    return {
        "/run/containerd": str(lay.runtime_socket.parent),  # the runtime's socket folder
        "/run/resource-enforcer": str(lay.relay_dir),
        "/var/lib/resource-enforcer": str(lay.enforcer_state),
        "/var/run/nri": str(lay.nri_dir),
        "/var/lib/kubelet": str(lay.kubelet_root),
        "/var/run/cdi": str(lay.cdi_dir),
    }


def _swap(text: str, paths: dict[str, str]) -> str:
    for real, ours in paths.items():
        if text == real or text.startswith(real + "/") or ("=" + real) in text:
            return text.replace(real, ours, 1)
    return text


def enforcer_patch(daemonset: dict[str, Any], lay: Layout) -> list[dict[str, Any]]:
    """JSON patch of the rendered DaemonSet: node-local paths only (args, mounts, volumes)."""
    paths = _host_paths(lay)
    spec = daemonset["spec"]["template"]["spec"]
    container = copy.deepcopy(spec["containers"][0])
    args = [
        f"--runtime-socket={lay.runtime_socket}"
        if a.startswith("--runtime-socket=")
        else _swap(a, paths)
        for a in container["args"]
    ]
    mounts = container["volumeMounts"]
    for m in mounts:
        m["mountPath"] = _swap(m["mountPath"], paths)
    volumes = copy.deepcopy(spec["volumes"])
    for v in volumes:
        if "hostPath" in v:
            v["hostPath"]["path"] = _swap(v["hostPath"]["path"], paths)
    base = "/spec/template/spec"
    return [
        {"op": "replace", "path": f"{base}/containers/0/args", "value": args},
        {"op": "replace", "path": f"{base}/containers/0/volumeMounts", "value": mounts},
        {"op": "replace", "path": f"{base}/volumes", "value": volumes},
    ]


def write_overlay(lay: Layout, kubectl: Kubectl, mode: str) -> Path:
    """The test bed's overlay over deploy/ (relay) or deploy/webhook + deploy/nri (NRI)."""
    bases = [REPO / "deploy"] if mode == "relay" else [REPO / "deploy/webhook", REPO / "deploy/nri"]
    rendered = ""
    for b in bases:
        rendered += kubectl.run("kustomize", str(b)).stdout + "\n---\n"
    daemonset = next(
        d
        for d in yaml.safe_load_all(rendered)
        if d and d.get("kind") == "DaemonSet" and d["metadata"]["name"] == "resource-enforcer"
    )
    overlay = lay.deploy / "overlay"
    if overlay.exists():
        shutil.rmtree(overlay)
    overlay.mkdir(parents=True)
    kustomization = {
        "apiVersion": "kustomize.config.k8s.io/v1beta1",
        "kind": "Kustomization",
        # kustomize takes folders by relative path only.
        "resources": [os.path.relpath(b, overlay) for b in bases],
        # The NodeResourceTopology CRD and its RBAC, as docs/scheduling.md tells an operator;
        # the API server validates every object the enforcer writes against it.
        "components": [os.path.relpath(NRT_COMPONENT, overlay)],
        "images": [
            {
                "name": f"kube-resource-enforcer/{name}",
                "newName": ref.rsplit(":", 1)[0],
                "newTag": ref.rsplit(":", 1)[1],
            }
            for name, ref in IMAGES.items()
        ],
        "patches": [
            {
                "target": {"kind": "DaemonSet", "name": "resource-enforcer"},
                "patch": json.dumps(enforcer_patch(daemonset, lay)),
            }
        ],
    }
    (overlay / "kustomization.yaml").write_text(yaml.safe_dump(kustomization, sort_keys=False))
    return overlay


def deploy(lay: Layout, kubectl: Kubectl, mode: str, webhook_cli: Path) -> None:
    """docs/webhook.md, "With `resource-webhook certs`", through the overlay."""
    for d in (lay.enforcer_state, lay.relay_dir, lay.cdi_dir):
        d.mkdir(parents=True, exist_ok=True)
    certs = lay.deploy / "certs"
    _run(
        [
            str(webhook_cli),
            "certs",
            "--service",
            "resource-webhook",
            "--namespace",
            "resource-enforcer",
            "--out",
            str(certs),
        ]
    )
    overlay = write_overlay(lay, kubectl, mode)
    kubectl.run("apply", "-k", str(overlay), timeout=120)
    kubectl.run("apply", "-f", str(certs / "webhook-secret.yaml"))
    bundle = (certs / "ca-bundle.b64").read_text().strip()
    base64.b64decode(bundle, validate=True)
    patch = [{"op": "add", "path": "/webhooks/0/clientConfig/caBundle", "value": bundle}]
    kubectl.run(
        "patch",
        "mutatingwebhookconfiguration",
        "resource-enforcer",
        "--type=json",
        "-p",
        json.dumps(patch),
    )


def undeploy(lay: Layout, kubectl: Kubectl) -> None:
    """Remove what deploy() applied (the overlay's objects; the Secret goes with the namespace)."""
    overlay = lay.deploy / "overlay"
    kubectl.run("delete", "-k", str(overlay), "--ignore-not-found", "--wait=true", timeout=300)


def helm_values(lay: Layout, mode: str) -> dict[str, Any]:
    """Values of the Helm chart for this bed: what the overlay sets, as values (the images'
    local names, the private containerd's node paths)."""
    images_values = {
        name: {"repository": ref.rsplit(":", 1)[0], "tag": ref.rsplit(":", 1)[1]}
        for name, ref in IMAGES.items()
    }
    return {
        "mode": mode,
        "images": images_values,
        "enforcer": {
            "paths": {
                "runtimeSocket": str(lay.runtime_socket),
                "relaySocket": str(lay.relay_socket),
                "nriSocket": str(lay.nri_socket),
                "stateDir": str(lay.enforcer_state),
                "kubeletDir": str(lay.kubelet_root),
                "cdiDir": str(lay.cdi_dir),
            }
        },
    }
