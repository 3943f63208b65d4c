"""deploy/enforcer/ and Dockerfile.enforcer: rendered by kustomize (inside deploy/ and alone),
valid against the Kubernetes schemas, RBAC exactly as documented, and the DaemonSet consistent
with the enforcer's command line, the image and the docs."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from enforcer.cli import parser
from enforcer.configuration import parse_config
from tests.support.manifests import dockerfile as read_dockerfile
from tests.support.manifests import exec_form, kustomize

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
FOLDER = DEPLOY / "enforcer"
NAMESPACE = "resource-enforcer"
NAME = "resource-enforcer"
SCHEMA_VERSIONS = ["1.25.0", kubernetes_validate.latest_version()]


def is_enforcers(doc: dict[str, Any]) -> bool:
    return doc["metadata"].get("labels", {}).get("app.kubernetes.io/name") == NAME


@pytest.fixture(scope="module")
def everything() -> list[dict[str, Any]]:
    return kustomize(DEPLOY)


@pytest.fixture(scope="module")
def objects(everything: list[dict[str, Any]]) -> dict[tuple[str, str], dict[str, Any]]:
    """The enforcer's objects as deploy/ renders them, by (kind, name)."""
    return {(d["kind"], d["metadata"]["name"]): d for d in everything if is_enforcers(d)}


def one(objects: dict[tuple[str, str], dict[str, Any]], kind: str) -> dict[str, Any]:
    (found,) = [d for (k, _), d in objects.items() if k == kind]
    return found


def manifest_files() -> list[Path]:
    return sorted(p for p in FOLDER.glob("*.yaml") if p.name != "kustomization.yaml")


def example_files() -> list[Path]:
    return sorted((FOLDER / "examples").glob("*.yaml"))


# --- rendering and schemas ---------------------------------------------------------------------


def test_deploy_renders_the_enforcer(objects: dict[tuple[str, str], dict[str, Any]]) -> None:
    assert set(objects) == {
        ("ServiceAccount", NAME),
        ("Role", NAME),
        ("RoleBinding", NAME),
        ("ClusterRole", NAME),
        ("ClusterRoleBinding", NAME),
        ("ConfigMap", "resource-enforcer-config.default"),
        ("DaemonSet", NAME),
    }
    for (kind, _), doc in objects.items():
        if not kind.startswith("Cluster"):
            assert doc["metadata"]["namespace"] == NAMESPACE


def test_the_namespace_comes_with_deploy(everything: list[dict[str, Any]]) -> None:
    assert {"kind": "Namespace", "name": NAMESPACE} in [
        {"kind": d["kind"], "name": d["metadata"]["name"]} for d in everything
    ]


def test_the_enforcer_folder_renders_alone(
    objects: dict[tuple[str, str], dict[str, Any]],
) -> None:
    alone = kustomize(FOLDER)
    assert len(alone) == len(manifest_files())
    assert {(d["kind"], d["metadata"]["name"]): d for d in alone} == objects


def test_kustomizations_list_plain_files() -> None:
    """Old kustomize (kubectl 1.20, Debian's kubernetes-client) takes only files in
    `resources:`, and no newer field."""
    kustomization = yaml.safe_load((FOLDER / "kustomization.yaml").read_text())
    assert set(kustomization) <= {"apiVersion", "kind", "resources"}
    assert sorted(kustomization["resources"]) == sorted(p.name for p in manifest_files())
    top = yaml.safe_load((DEPLOY / "kustomization.yaml").read_text())
    assert set(top) <= {"apiVersion", "kind", "resources"}
    listed = [entry for entry in top["resources"] if entry.startswith("enforcer/")]
    assert sorted(listed) == sorted(f"enforcer/{p.name}" for p in manifest_files())
    for entry in top["resources"]:
        assert (DEPLOY / entry).is_file(), entry


@pytest.mark.parametrize("version", SCHEMA_VERSIONS)
def test_every_object_is_valid(
    version: str, objects: dict[tuple[str, str], dict[str, Any]]
) -> None:
    docs = list(objects.values())
    for path in manifest_files() + example_files():
        docs += [d for d in yaml.safe_load_all(path.read_text()) if d]
    for doc in docs:
        kubernetes_validate.validate(doc, version, strict=True)


def test_configmaps_hold_valid_configurations(
    objects: dict[tuple[str, str], dict[str, Any]],
) -> None:
    maps = [one(objects, "ConfigMap")]
    maps += [yaml.safe_load(p.read_text()) for p in example_files()]
    names = set()
    for cm in maps:
        name = cm["metadata"]["name"]
        names.add(name.split(".")[1])
        assert name.startswith("resource-enforcer-config.")
        assert set(cm["data"]) == {"config.yaml"}
        parse_config(yaml.safe_load(cm["data"]["config.yaml"]))  # raises when refused
    assert names == {"default", "group", "node"}


# --- RBAC ----------------------------------------------------------------------------------------


def rules(doc: dict[str, Any]) -> set[tuple[str, str, str]]:
    """(apiGroup, resource, verb) triples, with no other field used."""
    out = set()
    for rule in doc["rules"]:
        assert set(rule) == {"apiGroups", "resources", "verbs"}, rule
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                for verb in rule["verbs"]:
                    out.add((group, resource, verb))
    return out


def test_rbac_is_exactly_what_the_enforcer_needs(
    objects: dict[tuple[str, str], dict[str, Any]],
) -> None:
    role, cluster_role = one(objects, "Role"), one(objects, "ClusterRole")
    assert rules(role) == {
        ("", "configmaps", "get"),
        ("", "configmaps", "list"),
        ("", "configmaps", "watch"),
        ("", "events", "create"),
    }
    assert role["metadata"]["namespace"] == NAMESPACE
    assert rules(cluster_role) == {
        ("", "nodes", "get"),
        ("", "nodes", "patch"),
        # The DRA driver: claims read, its node's ResourceSlices written.
        ("resource.k8s.io", "resourceclaims", "get"),
        *(
            ("resource.k8s.io", "resourceslices", verb)
            for verb in ("get", "list", "watch", "create", "update", "delete")
        ),
    }
    subject = {"kind": "ServiceAccount", "name": NAME, "namespace": NAMESPACE}
    for binding, kind, role_doc in (
        (one(objects, "RoleBinding"), "Role", role),
        (one(objects, "ClusterRoleBinding"), "ClusterRole", cluster_role),
    ):
        assert binding["subjects"] == [subject]
        assert binding["roleRef"] == {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": kind,
            "name": role_doc["metadata"]["name"],
        }


def test_nothing_else_is_bound_to_the_enforcer(everything: list[dict[str, Any]]) -> None:
    bound = [
        d
        for d in everything
        if d["kind"] in ("RoleBinding", "ClusterRoleBinding")
        and any(s.get("name") == NAME for s in d.get("subjects", []))
    ]
    assert len(bound) == 2


# --- the DaemonSet -------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def daemonset(objects: dict[tuple[str, str], dict[str, Any]]) -> dict[str, Any]:
    return one(objects, "DaemonSet")


@pytest.fixture(scope="module")
def pod(daemonset: dict[str, Any]) -> dict[str, Any]:
    return daemonset["spec"]["template"]["spec"]


@pytest.fixture(scope="module")
def container(pod: dict[str, Any]) -> dict[str, Any]:
    (c,) = pod["containers"]
    return c


def run_args(container: dict[str, Any]) -> Any:
    """The container's arguments as `resource-enforcer` parses them ($(VAR)s expanded)."""
    args = [a.replace("$(POD_IP)", "10.0.0.7") for a in container["args"]]
    return parser().parse_args(args)


def mounts(pod: dict[str, Any], container: dict[str, Any]) -> dict[str, tuple[str, bool]]:
    """Host path -> (mount path, read-only)."""
    volumes = {v["name"]: v for v in pod["volumes"]}
    out = {}
    for m in container["volumeMounts"]:
        volume = volumes[m["name"]]
        if "hostPath" in volume:
            out[volume["hostPath"]["path"]] = (m["mountPath"], m.get("readOnly", False))
    return out


def test_daemonset_scheduling(daemonset: dict[str, Any], pod: dict[str, Any]) -> None:
    assert pod["priorityClassName"] == "system-node-critical"
    assert pod["tolerations"] == [{"operator": "Exists"}]  # every taint
    assert pod["serviceAccountName"] == NAME
    assert pod["hostNetwork"] is True and pod["hostPID"] is True
    assert pod["dnsPolicy"] == "ClusterFirstWithHostNet"
    assert daemonset["spec"]["updateStrategy"] == {
        "type": "RollingUpdate",
        "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0},
    }
    selector = daemonset["spec"]["selector"]["matchLabels"]
    assert selector.items() <= daemonset["spec"]["template"]["metadata"]["labels"].items()


def test_node_name_comes_from_the_downward_api(container: dict[str, Any]) -> None:
    env = {e["name"]: e["valueFrom"]["fieldRef"]["fieldPath"] for e in container["env"]}
    assert env == {
        "NODE_NAME": "spec.nodeName",
        "POD_NAMESPACE": "metadata.namespace",
        "POD_IP": "status.podIP",
    }
    assert "--node-name" not in " ".join(container["args"])  # NODE_NAME is its default


def test_host_paths_match_the_command_line(pod: dict[str, Any], container: dict[str, Any]) -> None:
    args = run_args(container)
    assert args.command == "run" and container["command"] == ["resource-enforcer"]
    paths = mounts(pod, container)
    assert set(paths) == {
        "/run/containerd",
        "/run/resource-enforcer",
        "/var/lib/resource-enforcer",
        "/sys",
        "/sys/fs/cgroup",
        "/var/lib/kubelet/plugins_registry",
        "/var/lib/kubelet/plugins",
        "/var/run/cdi",
    }
    assert paths["/sys"][1] is True  # read-only
    assert all(not ro for host, (_, ro) in paths.items() if host != "/sys")
    assert Path(args.runtime_socket).parent == Path(paths["/run/containerd"][0])
    assert Path(args.relay_socket).parent == Path(paths["/run/resource-enforcer"][0])
    assert args.state_dir == paths["/var/lib/resource-enforcer"][0]
    assert args.sysfs_root == paths["/sys"][0]
    assert args.cgroupfs_root == paths["/sys/fs/cgroup"][0]
    # resctrl is mounted under /sys where the machine has it (see the manifest's comment).
    assert args.resctrl_root == f"{paths['/sys'][0]}/fs/resctrl"
    assert args.cluster_config == "on" and args.fallback_link is True
    # The DRA driver's sockets land where kubelet looks for them, at the same paths.
    for sub in ("plugins_registry", "plugins"):
        host = f"/var/lib/kubelet/{sub}"
        assert paths[host][0] == host == f"{args.kubelet_dir}/{sub}"
    assert paths["/var/run/cdi"][0] == args.cdi_dir == "/var/run/cdi"


def test_kubelet_waits_for_the_enforcers_graceful_stop(
    pod: dict[str, Any], container: dict[str, Any]
) -> None:
    # kubelet's SIGKILL comes terminationGracePeriodSeconds after its SIGTERM: by then the
    # calls in flight must have had their --grace-period, and the state must be saved.
    grace = run_args(container).grace_period
    assert grace >= 30  # a StopContainer lasts as long as a pod's grace period (30 s default)
    assert pod["terminationGracePeriodSeconds"] >= grace + 10


def test_privileges_are_kept_to_what_is_needed(container: dict[str, Any]) -> None:
    security = container["securityContext"]
    assert security["privileged"] is False
    assert security["allowPrivilegeEscalation"] is False
    assert security["capabilities"] == {"drop": ["ALL"]}
    assert security["readOnlyRootFilesystem"] is True
    assert security["runAsUser"] == 0
    assert security["seccompProfile"] == {"type": "RuntimeDefault"}


def test_probes_read_this_pods_own_health_file(
    pod: dict[str, Any], container: dict[str, Any], tmp_path: Path
) -> None:
    # Not a port: with hostNetwork it would answer for whichever enforcer holds it while an
    # update runs two of them. The health file lives on an emptyDir: this pod's alone.
    health = Path(run_args(container).health_file)
    volumes = {v["name"]: v for v in pod["volumes"]}
    mount = next(m for m in container["volumeMounts"] if health.is_relative_to(m["mountPath"]))
    assert "emptyDir" in volumes[mount["name"]]
    commands = {
        p: container[p]["exec"]["command"]
        for p in ("startupProbe", "readinessProbe", "livenessProbe")
    }
    assert all(str(health) in " ".join(c) for c in commands.values())

    # The probe commands themselves, run here against the file as the enforcer writes it.
    from enforcer.app.health import HealthFile

    local = tmp_path / "enforcer.health"

    def passes(probe: str) -> bool:
        command = [part.replace(str(health), str(local)) for part in commands[probe]]
        if command[0] == "python":
            command[0] = sys.executable
        return subprocess.run(command, capture_output=True, timeout=30).returncode == 0

    assert not any(passes(p) for p in commands)  # not written yet
    HealthFile(str(local)).write("standby")  # waiting to take over, or handed over
    assert passes("startupProbe") and passes("livenessProbe") and not passes("readinessProbe")
    HealthFile(str(local)).write("serving")
    assert passes("startupProbe") and passes("livenessProbe") and passes("readinessProbe")
    old = time.time() - 120
    os.utime(local, (old, old))  # a process that stopped rewriting it
    assert not passes("livenessProbe")


def test_resources(container: dict[str, Any]) -> None:
    # No declared port: with hostNetwork it would be a host port and block the surge pod.
    assert "ports" not in container
    requests = container["resources"]["requests"]
    assert {"cpu", "memory"} <= set(requests)
    assert "memory" not in container["resources"].get("limits", {})


# --- Dockerfile.enforcer -------------------------------------------------------------------------


def dockerfile() -> dict[str, list[str]]:
    return read_dockerfile(ROOT / "Dockerfile.enforcer")


def test_dockerfile_agrees_with_the_daemonset(container: dict[str, Any]) -> None:
    d = dockerfile()
    # The real base by default; tests/images builds on a local one through the build argument.
    # The default base is pinned (tests/deploy/test_pins.py).
    assert d["ARG"][0].startswith("BASE_IMAGE=python:3.11.") and d["FROM"] == ["${BASE_IMAGE}"]
    assert exec_form(d["ENTRYPOINT"][-1]) == container["command"] == ["resource-enforcer"]
    # JSON log lines in the image, as in the DaemonSet (the command line's default is text).
    assert exec_form(d["CMD"][-1]) == ["run", "--log-format", "json"]
    assert "--log-format=json" in container["args"]
    assert d["USER"] == ["0:0"]


def test_dockerfile_installs_only_the_enforcers_dependencies() -> None:
    run = " ".join(dockerfile()["RUN"])
    assert "pip install --no-deps ." in run
    for needed in (
        "grpcio", "protobuf", "pydantic", "PyYAML", "prometheus-client", "kubernetes", "uvloop",
    ):  # fmt: skip
        assert f'"{needed}' in run, needed
    for not_needed in ("fastapi", "uvicorn", "cryptography", "pytest", "hypothesis", "httpx"):
        assert not_needed not in run


def test_the_enforcer_runs_without_the_webhooks_dependencies() -> None:
    """What the image leaves out is never imported by `resource-enforcer`."""
    blocked = ["fastapi", "uvicorn", "starlette", "cryptography", "httpx", "jsonpatch"]
    code = f"""
import sys
class Block:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in {blocked!r}:
            raise ImportError("not in the image: " + name)
sys.meta_path.insert(0, Block())
import enforcer.cli, enforcer.app.run, enforcer.cluster.config_source, enforcer.cluster.client
import enforcer.commands.plan, enforcer.commands.status, enforcer.commands.check_config
import kubernetes.client, kubernetes.watch, kubernetes.config
sys.argv = ["resource-enforcer", "run", "--help"]
enforcer.cli.main()
"""
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=ROOT
    )
    assert out.returncode == 0, out.stderr
    assert "--cluster-config" in out.stdout and "--fallback-link" in out.stdout


# --- docs ----------------------------------------------------------------------------------------


def test_install_guide_covers_the_steps() -> None:
    text = (ROOT / "docs" / "install.md").read_text()
    for needed in (
        "kubectl apply -k deploy/",
        "--container-runtime-endpoint",
        "unix:///run/resource-enforcer/cri.sock",
        "cpuManagerPolicy: none",
        "Rolling back",
        "resource-enforcer.dev/config-status",
    ):
        assert needed in text, needed


def test_the_health_section_names_only_what_exists() -> None:
    """Every metric the on-call section of the install guide points at is one the programs
    export, and the annotation and commands it names are the real ones."""
    from enforcer.metrics import EnforcerMetrics
    from webhook.metrics import Metrics

    text = (ROOT / "docs" / "install.md").read_text()
    section = text[text.index("## Is it healthy?") :]
    section = section[: section.index("\n## ", 1)]
    exported = set()
    for registry in (EnforcerMetrics().registry, Metrics().registry):
        for family in registry.collect():
            # The names scrapes show, whether or not a labelled series exists yet.
            suffixes = {"counter": ["_total"], "histogram": ["", "_bucket", "_sum", "_count"]}
            exported.update(family.name + x for x in suffixes.get(family.type, [""]))
    named = set(re.findall(r"resource_(?:enforcer|webhook)_[a-z_]+", section))
    assert named and named <= exported, named - exported
    for needed in (
        "resource_enforcer_build_info",
        "resource_webhook_build_info",
        "resource-enforcer.dev/config-status",
        "resource-enforcer status",
        "--output json",
        "system-cluster-critical",
    ):
        assert needed in section, needed
