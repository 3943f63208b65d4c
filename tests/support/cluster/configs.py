"""The cluster's configuration files: kubeconfigs, kubelet's KubeletConfiguration, the private
containerd 2.x's config.toml (version 3) and the CNI network (bridge, host-local, portmap,
loopback from Debian's containernetworking-plugins)."""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from tests.support.cluster.layout import (
    BRIDGE,
    CGROUP_ROOT,
    CNI_BIN_DIR,
    CNI_NETWORK,
    PAUSE_IMAGE,
    POD_CIDR,
    RUNC,
    Layout,
)


def kubeconfig(server: str, ca: Path, crt: Path, key: Path, user: str) -> str:
    """A kubeconfig with one cluster, one user (a client certificate) and one context."""
    doc = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {"name": "kre", "cluster": {"server": server, "certificate-authority": str(ca)}}
        ],
        "users": [{"name": user, "user": {"client-certificate": str(crt), "client-key": str(key)}}],
        "contexts": [{"name": "kre", "context": {"cluster": "kre", "user": user}}],
        "current-context": "kre",
    }
    return yaml.safe_dump(doc, sort_keys=False)


def kubelet_config(
    lay: Layout, runtime_endpoint: str, cpu_manager: str = "none", *, cgroup_v1: bool = True
) -> str:
    """KubeletConfiguration as on a real node of this kind (cgroup v1, cgroupfs, no swap limit;
    ``cgroup_v1=False`` for the cgroup v2 VM's node, where kubelet needs no override).

    CPU manager `none`: the enforcer pins (docs/install.md, Step 4). Eviction and image garbage
    collection thresholds are loosened: the test machine's disk is small and shared, and the
    images were imported by hand (there is no registry to pull them from again).
    """
    pki = lay.pki
    doc = {
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        "containerRuntimeEndpoint": runtime_endpoint,
        "cgroupDriver": "cgroupfs",
        "cgroupsPerQOS": True,
        "cgroupRoot": f"/{CGROUP_ROOT}",
        "cpuManagerPolicy": cpu_manager,
        "failSwapOn": False,
        "authentication": {
            "anonymous": {"enabled": False},
            "webhook": {"enabled": True},
            "x509": {"clientCAFile": str(pki / "ca.crt")},
        },
        "authorization": {"mode": "Webhook"},
        "tlsCertFile": str(pki / "kubelet.crt"),
        "tlsPrivateKeyFile": str(pki / "kubelet.key"),
        "readOnlyPort": 0,
        "healthzBindAddress": "127.0.0.1",
        "clusterDomain": "cluster.local",
        "podLogsDir": str(lay.pod_logs),
        "staticPodPath": "",
        "rotateCertificates": False,
        "serverTLSBootstrap": False,
        "imageGCHighThresholdPercent": 100,
        "imageGCLowThresholdPercent": 99,
        "evictionHard": {
            "memory.available": "100Mi",
            "nodefs.available": "1%",
            "nodefs.inodesFree": "1%",
            "imagefs.available": "1%",
        },
        "maxPods": 50,
        "registerNode": True,
        "serializeImagePulls": False,
        "shutdownGracePeriod": "0s",
        "nodeStatusUpdateFrequency": "5s",
        "syncFrequency": "10s",
    }
    if cgroup_v1:
        # Kubernetes 1.35+ refuses cgroup v1 hosts by default (KEP-5573); this machine is one.
        doc["failCgroupV1"] = False
    if cpu_manager == "static":
        # static needs CPUs kept back from the pods; it rounds 100m up to one whole CPU
        # (CPU 0) for itself, while the node's allocatable shrinks by 100m only, so the pods
        # already running are admitted again when kubelet restarts.
        doc["kubeReserved"] = {"cpu": "100m"}
    return yaml.safe_dump(doc, sort_keys=False)


def _q(value: str) -> str:
    return json.dumps(value)  # a TOML basic string is a JSON string for these paths


def containerd_config(lay: Layout, snapshotter: str) -> str:
    """config.toml (version 3) of the private containerd 2.x: its own root, state and sockets,
    the pause image imported locally, runc from bookworm with the cgroupfs driver, CNI from
    Debian's plugins with a private configuration folder, NRI on with its own socket."""
    d = lay.runtime_dir
    rt = '[plugins."io.containerd.cri.v1.runtime"'
    return f"""\
# Written by tests.support.cluster: the cluster test bed's private containerd 2.x.
version = 3
root = {_q(str(d / "root"))}
state = {_q(str(d / "state"))}
# 0: leave containerd's own oom_score alone (lowering it is not permitted here).
oom_score = 0
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs",
  "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper",
  "io.containerd.snapshotter.v1.erofs"]

[grpc]
  address = {_q(str(lay.runtime_socket))}

[ttrpc]
  address = {_q(str(lay.runtime_socket) + ".ttrpc")}

[debug]
  address = ""

[metrics]
  address = ""

[plugins]
  [plugins."io.containerd.cri.v1.images"]
    snapshotter = {_q(snapshotter)}
    [plugins."io.containerd.cri.v1.images".pinned_images]
      sandbox = {_q(PAUSE_IMAGE)}

  {rt}]
    # Without this runc fails here: lowering oom_score_adj is not permitted (FACTS.md).
    restrict_oom_score_adj = true
    disable_apparmor = true
    enable_selinux = false
    tolerate_missing_hugetlb_controller = true
    netns_mounts_under_state_dir = true
    # CDI (the DRA driver's claim specs) from the bed's own folder, not the host's.
    enable_cdi = true
    cdi_spec_dirs = [{_q(str(lay.cdi_dir))}]

    {rt}.cni]
      bin_dirs = [{_q(CNI_BIN_DIR)}]
      conf_dir = {_q(str(lay.cni_conf))}
      max_conf_num = 1

    {rt}.containerd]
      default_runtime_name = "runc"

      {rt}.containerd.runtimes.runc]
        runtime_type = "io.containerd.runc.v2"

        {rt}.containerd.runtimes.runc.options]
          BinaryName = {_q(RUNC)}
          # cgroupfs driver, as kubelet's cgroupDriver: container cgroup = <parent>/<id>.
          SystemdCgroup = false
          Root = {_q(str(d / "runc"))}

  [plugins."io.containerd.grpc.v1.cri"]
    disable_tcp_service = true
    stream_server_address = "127.0.0.1"
    stream_server_port = "0"

  [plugins."io.containerd.nri.v1.nri"]
    disable = false
    socket_path = {_q(str(lay.nri_socket))}
    plugin_path = {_q(str(lay.nri_dir / "plugins"))}
    plugin_config_path = {_q(str(lay.nri_dir / "conf.d"))}
    plugin_registration_timeout = "5s"
    plugin_request_timeout = "2s"
"""


def cni_conflist(lay: Layout, *, portmap: bool = True) -> str:
    """One bridge network with host-local addresses in a private range; no masquerading (pods
    only talk to the node and to each other). ``portmap=False``: without the port-mapping
    plugin, which needs iptables (the VM node has none)."""
    doc = {
        "cniVersion": "1.0.0",
        "name": CNI_NETWORK,
        "plugins": [
            {
                "type": "bridge",
                "bridge": BRIDGE,
                "isGateway": True,
                "ipMasq": False,
                "hairpinMode": True,
                "ipam": {
                    "type": "host-local",
                    "dataDir": str(lay.cni_ipam),
                    "ranges": [[{"subnet": POD_CIDR}]],
                    "routes": [{"dst": "0.0.0.0/0"}],
                },
            },
            {"type": "portmap", "capabilities": {"portMappings": True}},
        ],
    }
    if not portmap:
        doc["plugins"] = doc["plugins"][:1]
    return json.dumps(doc, indent=2) + "\n"
