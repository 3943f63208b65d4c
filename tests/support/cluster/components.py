"""The command lines of the cluster's programs, and how each is known to be up.

etcd on loopback (plain HTTP: nothing but the API server on this host talks to it), the API
server with the admission plugins a kubeadm cluster enables and `--enable-aggregator-routing`
(so it reaches the webhook through its endpoints, without kube-proxy or DNS), the controller
manager (service-account tokens, no node IPAM: the CNI's host-local range hands out addresses),
the scheduler, kubelet, and the private containerd 2.x.
"""

from __future__ import annotations

import urllib.request
from pathlib import Path

from tests.support.cluster.layout import (
    NODE_NAME,
    SERVICE_CIDR,
    Layout,
)

# Client certificates: file name -> (common name, organization).
CLIENTS = {
    "admin": ("kubernetes-admin", "system:masters"),
    "controller-manager": ("system:kube-controller-manager", ""),
    "scheduler": ("system:kube-scheduler", ""),
    "kubelet-client": (f"system:node:{NODE_NAME}", "system:nodes"),
    "apiserver-kubelet-client": ("kube-apiserver-kubelet-client", "system:masters"),
}
# Kubeconfig of each component: name -> client certificate.
KUBECONFIGS = {
    "admin": "admin",
    "controller-manager": "controller-manager",
    "scheduler": "scheduler",
    "kubelet": "kubelet-client",
}


def etcd_argv(bins: dict[str, Path], lay: Layout) -> list[str]:
    client = f"http://127.0.0.1:{lay.ports.etcd_client}"
    peer = f"http://127.0.0.1:{lay.ports.etcd_peer}"
    return [
        str(bins["etcd"] / "etcd"),
        "--name=kre",
        f"--data-dir={lay.etcd_data}",
        f"--listen-client-urls={client}",
        f"--advertise-client-urls={client}",
        f"--listen-peer-urls={peer}",
        f"--initial-advertise-peer-urls={peer}",
        f"--initial-cluster=kre={peer}",
        "--initial-cluster-state=new",
        "--listen-metrics-urls=",
        # A test bed on a shared, noisy disk: losing it on a power cut costs nothing.
        "--unsafe-no-fsync",
        "--log-level=warn",
    ]


def etcd_healthy(lay: Layout) -> bool:
    url = f"http://127.0.0.1:{lay.ports.etcd_client}/health"
    with urllib.request.urlopen(url, timeout=2) as r:
        return b'"true"' in r.read()


def apiserver_argv(bins: dict[str, Path], lay: Layout, node_ip: str) -> list[str]:
    pki = lay.pki
    return [
        str(bins["kubernetes"] / "kube-apiserver"),
        f"--etcd-servers=http://127.0.0.1:{lay.ports.etcd_client}",
        f"--secure-port={lay.ports.apiserver}",
        f"--advertise-address={node_ip}",
        f"--service-cluster-ip-range={SERVICE_CIDR}",
        f"--tls-cert-file={pki / 'apiserver.crt'}",
        f"--tls-private-key-file={pki / 'apiserver.key'}",
        f"--client-ca-file={pki / 'ca.crt'}",
        f"--kubelet-client-certificate={pki / 'apiserver-kubelet-client.crt'}",
        f"--kubelet-client-key={pki / 'apiserver-kubelet-client.key'}",
        "--kubelet-preferred-address-types=InternalIP,Hostname",
        "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
        f"--service-account-key-file={pki / 'sa.pub'}",
        f"--service-account-signing-key-file={pki / 'sa.key'}",
        "--authorization-mode=Node,RBAC",
        # The default plugins plus NodeRestriction, as kubeadm runs it.
        "--enable-admission-plugins=NodeRestriction",
        # Webhooks and aggregated APIs reached through their endpoints: no kube-proxy here.
        "--enable-aggregator-routing=true",
        "--allow-privileged=true",
        "--profiling=false",
        "--v=1",
    ]


def controller_manager_argv(bins: dict[str, Path], lay: Layout) -> list[str]:
    pki = lay.pki
    kubeconfig = lay.config / "controller-manager.kubeconfig"
    return [
        str(bins["kubernetes"] / "kube-controller-manager"),
        f"--kubeconfig={kubeconfig}",
        f"--authentication-kubeconfig={kubeconfig}",
        f"--authorization-kubeconfig={kubeconfig}",
        "--bind-address=127.0.0.1",
        f"--secure-port={lay.ports.controller_manager}",
        f"--service-account-private-key-file={pki / 'sa.key'}",
        f"--root-ca-file={pki / 'ca.crt'}",
        f"--service-cluster-ip-range={SERVICE_CIDR}",
        "--use-service-account-credentials=true",
        "--allocate-node-cidrs=false",
        "--leader-elect=false",
        "--profiling=false",
        "--v=1",
    ]


def scheduler_argv(bins: dict[str, Path], lay: Layout) -> list[str]:
    kubeconfig = lay.config / "scheduler.kubeconfig"
    return [
        str(bins["kubernetes"] / "kube-scheduler"),
        f"--kubeconfig={kubeconfig}",
        f"--authentication-kubeconfig={kubeconfig}",
        f"--authorization-kubeconfig={kubeconfig}",
        "--bind-address=127.0.0.1",
        f"--secure-port={lay.ports.scheduler}",
        "--leader-elect=false",
        "--profiling=false",
        "--v=1",
    ]


def kubelet_argv(bins: dict[str, Path], lay: Layout, node_ip: str) -> list[str]:
    return [
        str(bins["kubernetes"] / "kubelet"),
        f"--config={lay.config / 'kubelet.yaml'}",
        f"--kubeconfig={lay.config / 'kubelet.kubeconfig'}",
        f"--root-dir={lay.kubelet_root}",
        f"--cert-dir={lay.kubelet_root / 'pki'}",
        f"--hostname-override={NODE_NAME}",
        f"--node-ip={node_ip}",
        "--v=2",
    ]


def containerd_argv(bins: dict[str, Path], lay: Layout) -> list[str]:
    return [
        str(bins["containerd"] / "containerd"),
        f"--config={lay.config / 'containerd.toml'}",
        "--log-level=info",
    ]
