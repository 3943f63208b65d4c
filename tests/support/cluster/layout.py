"""Where everything of the single-node cluster lives, and its fixed names, ports and ranges.

One folder holds it all (``.cluster/`` at the repository root by default, git-ignored):
certificates, configuration files, etcd's data, kubelet's root, the private runtime's root,
state and sockets (containerd 2.x, or CRI-O with ``RUNTIME=crio``), the relay's socket and
state, and every component's log (``logs/``).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
NODE_NAME = "kre-node"
# Private ranges: pods on a bridge of their own, services never routed but for the one rule that
# stands in for kube-proxy (the API server's own service, for pods on the host network).
POD_CIDR = "10.217.0.0/24"
SERVICE_CIDR = "10.218.0.0/24"
API_SERVICE_IP = "10.218.0.1"
BRIDGE = "kre-cni0"
CNI_NETWORK = "kre-pods"
ETCD_CLIENT_PORT = 23790
ETCD_PEER_PORT = 23800
APISERVER_PORT = 6443
CNI_BIN_DIR = "/usr/lib/cni"  # Debian's containernetworking-plugins
RUNC = "/usr/sbin/runc"
PAUSE_IMAGE = "registry.k8s.io/pause:kre-local"
MODES = ("nri", "relay")
RUNTIMES = ("containerd", "crio")  # `make cluster-up RUNTIME=...` (CONTRACT.md)
# The start-up bench (`python -m bench startup`) also runs the node with neither program: its
# baseline. Not a MODE of `make cluster-up` (CONTRACT.md) nor of the tests.
NO_ENFORCER = "none"
# kubelet's cgroupRoot: the pods' cgroups are CGROUP_ROOT/kubepods/..., apart from the
# top-level kubepods that the kubelet emulator's tests use, so neither touches the other's.
CGROUP_ROOT = "kre-cluster"


def default_folder() -> Path:
    return Path(os.environ.get("KRE_CLUSTER_DIR", str(REPO / ".cluster")))


@dataclass(frozen=True)
class Ports:
    """The loopback ports of one cluster's control plane. The host's cluster has the defaults;
    another control plane beside it (the VM node's, tests/support/vmnode.py) takes others."""

    etcd_client: int = ETCD_CLIENT_PORT
    etcd_peer: int = ETCD_PEER_PORT
    apiserver: int = APISERVER_PORT
    controller_manager: int = 10257  # kube-controller-manager's default --secure-port
    scheduler: int = 10259  # kube-scheduler's default --secure-port


@dataclass(frozen=True)
class Layout:
    """Every path of one cluster, below ``root``, its control plane's ports and its runtime
    (``containerd`` or ``crio``)."""

    root: Path
    ports: Ports = Ports()
    runtime: str = "containerd"

    @property
    def pki(self) -> Path:
        return self.root / "pki"

    @property
    def logs(self) -> Path:
        return self.root / "logs"

    @property
    def run(self) -> Path:  # pid files and the cluster's own record
        return self.root / "run"

    @property
    def bin(self) -> Path:
        return self.root / "bin"

    @property
    def kubectl(self) -> Path:
        return self.bin / "kubectl"

    @property
    def kubeconfig(self) -> Path:
        return self.root / "kubeconfig"

    @property
    def etcd_data(self) -> Path:
        return self.root / "etcd"

    @property
    def kubelet_root(self) -> Path:
        return self.root / "kubelet"

    @property
    def pod_logs(self) -> Path:
        return self.root / "pod-logs"

    @property
    def config(self) -> Path:
        return self.root / "config"

    @property
    def runtime_dir(self) -> Path:  # the runtime's root, state, sockets, NRI and CDI folders
        return self.root / self.runtime

    @property
    def runtime_socket(self) -> Path:
        # CRI-O's in a folder of its own: the enforcer's pod mounts the socket's folder, and
        # CRI-O refuses to bind-mount its own root (which holds its storage's mounts) into a pod
        # from a private mount.
        if self.runtime == "crio":
            return self.runtime_dir / "sock" / "crio.sock"
        return self.runtime_dir / f"{self.runtime}.sock"

    @property
    def nri_dir(self) -> Path:
        return self.runtime_dir / "nri"

    @property
    def nri_socket(self) -> Path:
        return self.nri_dir / "nri.sock"

    @property
    def cdi_dir(self) -> Path:  # the CDI specs the private runtime reads (the DRA driver's)
        return self.runtime_dir / "cdi"

    @property
    def cni_conf(self) -> Path:
        return self.root / "cni" / "net.d"

    @property
    def cni_ipam(self) -> Path:
        return self.root / "cni" / "ipam"

    @property
    def relay_dir(self) -> Path:
        return self.root / "relay"

    @property
    def relay_socket(self) -> Path:
        return self.relay_dir / "cri.sock"

    @property
    def enforcer_state(self) -> Path:
        return self.root / "enforcer-state"

    @property
    def deploy(self) -> Path:  # the kustomize overlay of the test bed, and the webhook's certs
        return self.root / "deploy"

    @property
    def images(self) -> Path:
        return self.root / "images"

    def pid_file(self, name: str) -> Path:
        return self.run / f"{name}.pid"

    def log(self, name: str) -> Path:
        return self.logs / f"{name}.log"
