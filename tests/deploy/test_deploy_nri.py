"""deploy/nri/: the enforcer as an NRI plugin. Rendered by kustomize, valid against the
Kubernetes schemas, the same objects as deploy/enforcer/ but the DaemonSet, whose command line
is `resource-enforcer nri` with host paths that match it, no relay or runtime socket, and an
update that stops the old plugin before the new one starts."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest

from enforcer.cli import parser
from tests.support.manifests import kustomize

ROOT = Path(__file__).resolve().parents[2]
OVERLAY = ROOT / "deploy" / "nri"
BASE = ROOT / "deploy" / "enforcer"
SCHEMA_VERSIONS = ["1.25.0", kubernetes_validate.latest_version()]


def by_key(docs: list[dict[str, Any]]) -> dict[tuple[str, str], dict[str, Any]]:
    return {(d["kind"], d["metadata"]["name"]): d for d in docs}


@pytest.fixture(scope="module")
def overlay() -> dict[tuple[str, str], dict[str, Any]]:
    return by_key(kustomize(OVERLAY))


@pytest.fixture(scope="module")
def pod(overlay: dict[tuple[str, str], dict[str, Any]]) -> dict[str, Any]:
    return overlay[("DaemonSet", "resource-enforcer")]["spec"]["template"]["spec"]


def test_the_same_objects_as_the_relay_but_the_daemonset(
    overlay: dict[tuple[str, str], dict[str, Any]],
) -> None:
    base = by_key(kustomize(BASE))
    assert set(overlay) == set(base)
    for key, doc in base.items():
        if key[0] != "DaemonSet":
            assert overlay[key] == doc, key


@pytest.mark.parametrize("version", SCHEMA_VERSIONS)
def test_every_object_is_valid(
    version: str, overlay: dict[tuple[str, str], dict[str, Any]]
) -> None:
    for doc in overlay.values():
        kubernetes_validate.validate(doc, version, strict=True)


def test_the_command_line_is_nri_and_its_paths_are_mounted(pod: dict[str, Any]) -> None:
    (container,) = pod["containers"]
    args = parser().parse_args([a.replace("$(POD_IP)", "10.0.0.7") for a in container["args"]])
    assert args.command == "nri" and container["command"] == ["resource-enforcer"]
    assert (args.plugin_name, args.plugin_index) == ("resource-enforcer", "90")
    volumes = {v["name"]: v for v in pod["volumes"]}
    paths = {
        volumes[m["name"]]["hostPath"]["path"]: m["mountPath"]
        for m in container["volumeMounts"]
        if "hostPath" in volumes[m["name"]]
    }
    # The NRI socket's folder; neither the runtime's socket nor a relay socket.
    assert set(paths) == {
        "/var/run/nri",
        "/var/lib/resource-enforcer",
        "/sys",
        "/sys/fs/cgroup",
        "/var/lib/kubelet/plugins_registry",
        "/var/lib/kubelet/plugins",
        "/var/run/cdi",
    }
    # The DRA driver's sockets and CDI specs, at the host's paths.
    for sub in ("plugins_registry", "plugins"):
        assert paths[f"/var/lib/kubelet/{sub}"] == f"{args.kubelet_dir}/{sub}"
    assert paths["/var/run/cdi"] == args.cdi_dir
    assert Path(args.nri_socket).parent == Path(paths["/var/run/nri"])
    assert args.state_dir == paths["/var/lib/resource-enforcer"]
    assert args.sysfs_root == paths["/sys"] and args.cgroupfs_root == paths["/sys/fs/cgroup"]
    assert args.resctrl_root == f"{paths['/sys']}/fs/resctrl"
    assert args.cluster_config == "on"
    # Every mount names a volume that exists, and every volume is used.
    assert {m["name"] for m in container["volumeMounts"]} == set(volumes)
    # The probes read the health file the command line writes.
    assert args.health_file == "/tmp/enforcer.health"
    assert "/tmp/enforcer.health" in " ".join(container["readinessProbe"]["exec"]["command"])


def test_the_old_plugin_stops_before_the_new_one_starts(
    overlay: dict[tuple[str, str], dict[str, Any]],
) -> None:
    strategy = overlay[("DaemonSet", "resource-enforcer")]["spec"]["updateStrategy"]
    assert strategy == {
        "type": "RollingUpdate",
        "rollingUpdate": {"maxSurge": 0, "maxUnavailable": 1},
    }
