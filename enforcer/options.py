"""The options of `resource-enforcer run`, with the contract's defaults."""

from __future__ import annotations

from dataclasses import dataclass


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
    metrics_address: str = "127.0.0.1:8891"
