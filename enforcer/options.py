"""The options of `resource-enforcer run` and `resource-enforcer nri`, with the contract's
defaults (`nri` ignores the relay's sockets, `run` the NRI ones)."""

from __future__ import annotations

from dataclasses import dataclass

DEFAULT_NAMESPACE = "resource-enforcer"
DEFAULT_METRICS_ADDRESS = "127.0.0.1:8891"  # as resource_contract.config.MetricsConfig's


@dataclass(frozen=True)
class RunOptions:
    runtime_socket: str = "/run/containerd/containerd.sock"
    image_socket: str | None = None
    relay_socket: str = "/run/resource-enforcer/cri.sock"
    state_dir: str = "/var/lib/resource-enforcer"
    config: str | None = None
    sysfs_root: str = "/sys"
    cgroupfs_root: str = "/sys/fs/cgroup"
    resctrl_root: str = "/sys/fs/resctrl"
    # None: not given on the command line; the configuration's metrics.address then (its
    # default: DEFAULT_METRICS_ADDRESS). Empty: no endpoint.
    metrics_address: str | None = None
    # Configuration from the cluster (docs/enforcer.md): auto = on when a node name and API
    # credentials (--kubeconfig, or a pod's service account) are at hand.
    cluster_config: str = "auto"  # auto | on | off
    node_name: str | None = None  # default: $NODE_NAME
    namespace: str = DEFAULT_NAMESPACE  # where the ConfigMaps are; default: $POD_NAMESPACE
    kubeconfig: str | None = None  # default: the pod's service account
    # Leave the relay socket path as a link to the runtime's socket while no enforcer runs.
    fallback_link: bool = False
    # A file of this pod's own (an emptyDir) rewritten every few seconds with "serving" (this
    # enforcer is in charge) or "standby" (waiting to take over, or handed over): the
    # DaemonSet's probes read it, because with hostNetwork a port would answer for whichever
    # enforcer holds it during an update.
    health_file: str | None = None
    # SIGTERM/SIGINT: how long calls in flight may take to finish before they are cut (a
    # StopContainer lasts as long as the pod's termination grace period, 30 s by default).
    grace_period: float = 30.0
    # The DRA driver (dra.enabled): kubelet's root folder (plugins_registry/ and plugins/ under
    # it) and the folder of CDI specs the runtime reads.
    kubelet_dir: str = "/var/lib/kubelet"
    cdi_dir: str = "/var/run/cdi"
    # `nri`: the runtime's NRI socket, and the name and two-digit index to register with.
    nri_socket: str = "/var/run/nri/nri.sock"
    plugin_name: str = "resource-enforcer"
    plugin_index: str = "90"
