"""The cluster test bed's own files, without a cluster: the overlay changes node-local paths
only and mounts each at the same path as on the host (the relay's fallback link must point where
kubelet can follow it), the certificates say who is who, kubelet's configuration is a real
node's, and the Go modules pin one version of every staging module."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest
import yaml
from cryptography import x509
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from tests.support import vmnode
from tests.support.cluster import components as comp
from tests.support.cluster import configs, deploy
from tests.support.cluster.layout import CGROUP_ROOT, REPO, Layout
from tests.support.cluster.pki import ClusterPKI

NODE_PATHS = (
    "/run/containerd",
    "/run/resource-enforcer",
    "/var/lib/resource-enforcer",
    "/var/run/nri",
    "/var/lib/kubelet",
    "/var/run/cdi",
)


def rendered_daemonset(mode: str) -> dict:
    """The enforcer's DaemonSet as kustomize renders deploy/ (relay) or deploy/nri (NRI), with
    the machine's kubectl (.ci/system-deps.sh installs it)."""
    folder = REPO / ("deploy" if mode == "relay" else "deploy/nri")
    out = subprocess.run(
        ["kubectl", "kustomize", str(folder)], capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    return next(d for d in yaml.safe_load_all(out.stdout) if d and d["kind"] == "DaemonSet")


@pytest.mark.parametrize("mode", ["relay", "nri"])
def test_overlay_moves_node_local_paths_only(mode: str, tmp_path: Path) -> None:
    lay = Layout(tmp_path)
    ds = rendered_daemonset(mode)
    ops = {op["path"].rsplit("/", 1)[-1]: op["value"] for op in deploy.enforcer_patch(ds, lay)}
    before = ds["spec"]["template"]["spec"]["containers"][0]["args"]
    assert len(ops["args"]) == len(before)
    for old, new in zip(before, ops["args"], strict=True):
        if any(p in old for p in NODE_PATHS):
            assert new != old and str(tmp_path) in new, (old, new)
        else:
            assert new == old
    host = {v["name"]: v["hostPath"]["path"] for v in ops["volumes"] if "hostPath" in v}
    for m in ops["volumeMounts"]:
        if m["name"] in host and host[m["name"]].startswith(str(tmp_path)):
            assert m["mountPath"] == host[m["name"]]  # same path inside as outside
    assert host["sys"] == "/sys" and host["cgroup"] == "/sys/fs/cgroup"
    assert not any(p in yaml.safe_dump(ops) for p in NODE_PATHS)


def test_certificates_name_each_component(tmp_path: Path) -> None:
    pki = ClusterPKI(tmp_path)
    pki.ensure("node-x", "192.0.2.9", "10.218.0.1", clients=comp.CLIENTS)
    ca = x509.load_pem_x509_certificate(pki.ca.crt.read_bytes())
    api = x509.load_pem_x509_certificate(pki.pair("apiserver").crt.read_bytes())
    api.verify_directly_issued_by(ca)
    sans = api.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert "kubernetes.default.svc" in sans.get_values_for_type(x509.DNSName)
    assert {str(a) for a in sans.get_values_for_type(x509.IPAddress)} >= {"10.218.0.1", "192.0.2.9"}
    node = x509.load_pem_x509_certificate(pki.pair("kubelet-client").crt.read_bytes())
    node.verify_directly_issued_by(ca)
    subject = {a.oid: a.value for a in node.subject}
    assert subject[NameOID.COMMON_NAME] == "system:node:kre-node"
    assert subject[NameOID.ORGANIZATION_NAME] == "system:nodes"
    usage = node.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert list(usage) == [ExtendedKeyUsageOID.CLIENT_AUTH]
    # A second run keeps every file (a running cluster's certificates stay valid).
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    pki.ensure("node-x", "192.0.2.9", "10.218.0.1", clients=comp.CLIENTS)
    assert before == {p.name: p.read_bytes() for p in tmp_path.iterdir()}


def test_kubelet_is_configured_as_on_a_real_node(tmp_path: Path) -> None:
    cfg = yaml.safe_load(configs.kubelet_config(Layout(tmp_path), "unix:///x.sock"))
    assert cfg["cgroupDriver"] == "cgroupfs"  # containerd's SystemdCgroup = false
    assert cfg["cpuManagerPolicy"] == "none"  # the enforcer pins (docs/install.md, Step 4)
    assert cfg["failSwapOn"] is False and cfg["failCgroupV1"] is False
    assert cfg["cgroupRoot"] == f"/{CGROUP_ROOT}"
    toml = configs.containerd_config(Layout(tmp_path), "overlayfs")
    assert "SystemdCgroup = false" in toml and "restrict_oom_score_adj = true" in toml
    # The DRA driver's CDI specs are read from the bed's own folder.
    assert "enable_cdi = true" in toml and str(Layout(tmp_path).cdi_dir) in toml


def test_kubernetes_module_replaces_every_staging_module() -> None:
    """One `replace k8s.io/X => k8s.io/X v0.Y.Z` per staging module k8s.io/kubernetes replaces,
    all of the release's own version (read from its go.mod in the module cache)."""
    gomod = (REPO / "tests/beds/cluster/kubernetes/go.mod").read_text()
    version = re.search(r"^require k8s\.io/kubernetes (v1\.(\d+)\.(\d+))$", gomod, re.M)
    assert version, "no require line for k8s.io/kubernetes"
    staging = f"v0.{version.group(2)}.{version.group(3)}"
    replaces = dict(re.findall(r"^replace (k8s\.io/\S+) => \1 (\S+)$", gomod, re.M))
    assert replaces and set(replaces.values()) == {staging}
    upstream = subprocess.run(
        ["go", "mod", "download", "-json", f"k8s.io/kubernetes@{version.group(1)}"],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=REPO / "tests/beds/cluster/kubernetes",
    )
    assert upstream.returncode == 0, upstream.stderr
    import json

    theirs = Path(json.loads(upstream.stdout)["GoMod"]).read_text()
    wanted = set(re.findall(r"^\s*(k8s\.io/\S+) => \./staging/", theirs, re.M))
    assert wanted and wanted == set(replaces)


def test_kubelet_configuration_uses_only_fields_of_the_pinned_kubelet(tmp_path: Path) -> None:
    """kubelet ignores a key it does not know (a misspelt one silently does nothing): every key
    we write must be a json field of KubeletConfiguration in k8s.io/kubelet of the release."""
    gomod = (REPO / "tests/beds/cluster/kubernetes/go.mod").read_text()
    staging = re.search(r"^replace k8s\.io/kubelet => k8s\.io/kubelet (\S+)$", gomod, re.M)
    assert staging, "no replace line for k8s.io/kubelet"
    out = subprocess.run(
        ["go", "mod", "download", "-json", f"k8s.io/kubelet@{staging.group(1)}"],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=REPO / "tests/beds/cluster/kubernetes",
    )
    assert out.returncode == 0, out.stderr
    import json

    types = Path(json.loads(out.stdout)["Dir"], "config/v1beta1/types.go").read_text()
    body = types[types.index("type KubeletConfiguration struct") :]
    body = body[: body.index("\n}\n")]
    fields = set(re.findall(r'json:"([A-Za-z0-9]+)[,"]', body)) | {"apiVersion", "kind"}
    ours = yaml.safe_load(configs.kubelet_config(Layout(tmp_path), "unix:///x.sock"))
    assert set(ours) - fields == set()


@pytest.mark.parametrize("mode", ["relay", "nri"])
def test_the_chart_with_the_bed_values_matches_the_overlay(mode: str, tmp_path: Path) -> None:
    """test_helm_install.py installs the chart with deploy.helm_values: the enforcer gets the
    same command line, mounts and volumes as the kustomize overlay gives it."""
    from tests.support.helm import render

    lay = Layout(tmp_path)
    ops = {
        op["path"].rsplit("/", 1)[-1]: op["value"]
        for op in deploy.enforcer_patch(rendered_daemonset(mode), lay)
    }
    values = tmp_path / "values.yaml"
    values.write_text(yaml.safe_dump(deploy.helm_values(lay, mode)))
    ds = next(d for d in render(values_file=values) if d["kind"] == "DaemonSet")
    spec = ds["spec"]["template"]["spec"]
    assert spec["containers"][0]["args"] == ops["args"]
    assert spec["containers"][0]["volumeMounts"] == ops["volumeMounts"]
    assert spec["volumes"] == ops["volumes"]
    assert spec["containers"][0]["image"] == deploy.IMAGES["enforcer"]


def test_the_vm_nodes_control_plane_and_kubelet_stay_apart_from_the_hosts(tmp_path: Path) -> None:
    """The VM node (tests/support/vmnode.py) runs beside the host's cluster: other ports; an
    API server certificate the guest can check at 10.0.2.2; kubelet on cgroup v2 without the
    v1 override; a CNI network without portmap (no iptables in the VM)."""
    host = Layout(tmp_path)
    node = Layout(tmp_path, vmnode.PORTS)
    host_ports = set(vars(host.ports).values())
    assert host_ports.isdisjoint(vars(node.ports).values())
    argv = " ".join(
        comp.etcd_argv({"etcd": Path("/e")}, node)
        + comp.apiserver_argv({"kubernetes": Path("/k")}, node, "192.0.2.9")
        + comp.controller_manager_argv({"kubernetes": Path("/k")}, node)
        + comp.scheduler_argv({"kubernetes": Path("/k")}, node)
    )
    assert not any(re.search(rf"[:=]{port}\b", argv) for port in host_ports), argv
    pki = ClusterPKI(tmp_path / "pki")
    pki.ensure(
        "node-x", "192.0.2.9", "10.218.0.1", clients=comp.CLIENTS, extra_ips=(vmnode.GATEWAY,)
    )
    api = x509.load_pem_x509_certificate(pki.pair("apiserver").crt.read_bytes())
    sans = api.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert vmnode.GATEWAY in {str(a) for a in sans.get_values_for_type(x509.IPAddress)}
    cfg = yaml.safe_load(configs.kubelet_config(vmnode.GUEST, "unix:///x", cgroup_v1=False))
    assert "failCgroupV1" not in cfg and cfg["cpuManagerPolicy"] == "none"
    assert cfg["cgroupDriver"] == "cgroupfs"
    plugins = json.loads(configs.cni_conflist(vmnode.GUEST, portmap=False))["plugins"]
    assert [p["type"] for p in plugins] == ["bridge"]


def test_on_crio_the_relay_reaches_crios_socket_and_crio_keeps_to_the_beds_folder(
    tmp_path: Path,
) -> None:
    from tests.support.cluster import runtime
    from tests.support.crio_config import attach_dir

    lay = Layout(tmp_path, runtime="crio")
    ds = rendered_daemonset("relay")
    ops = {op["path"].rsplit("/", 1)[-1]: op["value"] for op in deploy.enforcer_patch(ds, lay)}
    (socket_arg,) = [a for a in ops["args"] if a.startswith("--runtime-socket=")]
    assert socket_arg == f"--runtime-socket={tmp_path}/crio/sock/crio.sock"
    mounted = {m["mountPath"] for m in ops["volumeMounts"]}
    assert str(lay.runtime_socket.parent) in mounted  # the socket's folder, same path
    assert str(lay.runtime_dir) not in mounted  # never CRI-O's root, with its storage
    argv, _ = runtime._crio(lay, "native")
    conf = (lay.runtime_dir / "crio.conf").read_text()
    assert argv[argv.index("--config") + 1] == str(lay.runtime_dir / "crio.conf")
    for key, value in (
        ("listen", lay.runtime_socket),
        ("nri_listen", lay.nri_socket),
        ("network_dir", lay.cni_conf),
        ("root", lay.runtime_dir / "root"),
    ):
        assert f'\n{key} = "{value}"\n' in conf, key
    assert 'cgroup_manager = "cgroupfs"' in conf  # as kubelet's cgroupDriver
    assert f'cdi_spec_dirs = ["{lay.cdi_dir}"]' in conf
    # Nothing of CRI-O's points outside the bed's folder but its programs, the CNI plugins and
    # the attach sockets' short folder, whose socket paths stay under the 107-byte limit.
    attach = attach_dir(lay.runtime_dir)
    try:
        assert f'container_attach_socket_dir = "{attach}"' in conf
        assert len(f"{attach}/{'f' * 64}/attach") <= 107
        for path in re.findall(r'"(/[^"]*)"', conf):
            assert path.startswith((str(tmp_path), "/usr/", str(attach))) or "/crio-" in path, path
    finally:
        runtime.forget(lay)
    assert not attach.exists()
