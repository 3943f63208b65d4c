"""Faults of the whole node, done to a running cluster: the runtime restarted, the node
rebooted in simulation, kubelet's CPU manager policy switched.

A simulated reboot is a power cut followed by a boot: every process of the cluster (kubelet,
the runtime and its shims with every pod's processes, the enforcer's and the webhook's pods,
the control plane, the reconnect service) killed with SIGKILL at once; then what a boot starts
without is taken away (what lives in /run on a node: the runtime's state folder with its
mounts and network namespaces, its sockets, the relay's folder; the pods' cgroups; the CNI
bridge and veths; the pods' volume mounts under kubelet's folder), while what a node keeps on
disk stays (etcd's data, kubelet's folder, the runtime's images and snapshots, the enforcer's
state folder). Then the boot: the control plane, the runtime, in relay mode the fallback link
and the reconnect service (as tmpfiles.d and systemd would), kubelet. The DaemonSet and the
Deployment bring our programs back, as on a node.
"""

from __future__ import annotations

import json
import shutil
import time

from tests.support.cluster import node, procs
from tests.support.cluster import runtime as rt
from tests.support.cluster.bed import COMPONENTS, Cluster, say


def restart_runtime(c: Cluster) -> None:
    """The runtime stopped (SIGTERM: the shims and the pods go on) and started again, as
    `systemctl restart containerd` (or crio) does."""
    procs.stop(c.lay, rt.process_name(c.lay))
    c.start_runtime()


def power_cut(c: Cluster) -> None:
    """SIGKILL to every process of the cluster at once, then what a boot starts without."""
    lay = c.lay
    shims = rt.monitor_pids(lay)
    victims = node.descendants(shims) | shims
    names = (*COMPONENTS, rt.process_name(lay))
    started = {pid for name in names if (pid := procs.pid_of(lay, name)) is not None}
    # kubelet's supervisor (the bed's systemd) goes with the node, and kubelet below it.
    victims |= started | node.descendants(started)
    say(f"power cut: SIGKILL to {len(victims)} processes")
    node.kill_all(victims)
    for name in (*COMPONENTS, rt.process_name(lay)):
        procs.stop(lay, name)  # reaps and forgets the pid file (nothing is left to signal)
    state = lay.runtime_dir / "state"
    for folder in (state, lay.kubelet_root):
        left = node.unmount_under(folder)
        if left:
            raise RuntimeError(f"could not unmount {left}")
    shutil.rmtree(state, ignore_errors=True)
    for sock in (lay.runtime_socket, lay.nri_socket):
        sock.unlink(missing_ok=True)
    for entry in lay.runtime_dir.glob("*.sock*"):  # the ttrpc socket beside it
        entry.unlink(missing_ok=True)
    shutil.rmtree(lay.relay_dir, ignore_errors=True)
    node.remove_bridge()
    left = node.remove_cgroups()
    if left:
        raise RuntimeError(f"cgroups still there after the power cut: {left}")


def boot(c: Cluster) -> None:
    """What a node's boot starts, in its order; returns once the node is Ready."""
    c.start_control_plane()
    c.start_runtime()
    if c.mode == "relay":
        c.start_fallback_and_reconnect()
    c.start_kubelet()
    c.wait_node_ready(240)


def reboot(c: Cluster) -> float:
    """Power cut and boot; the seconds it took until the node was Ready again."""
    started = time.monotonic()
    power_cut(c)
    boot(c)
    return time.monotonic() - started


def checkpoint_policy(c: Cluster) -> str | None:
    """The policy kubelet's CPU manager checkpoint names (its top-level `policyName`, which
    the v4 format keeps beside its `data`); None while there is none."""
    try:
        name = json.loads((c.lay.kubelet_root / "cpu_manager_state").read_text())["policyName"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return str(name)


def set_kubelet_cpu_manager(c: Cluster, policy: str) -> None:
    """kubelet restarted with ``cpuManagerPolicy: policy`` (``static`` keeps CPU 0 back from
    the pods). kubelet refuses to start when its checkpoint names another policy, so the
    checkpoint goes first, as docs/install.md tells an operator."""
    state = c.lay.kubelet_root / "cpu_manager_state"
    c.stop_kubelet()
    c.write_kubelet_config(policy)
    state.unlink(missing_ok=True)
    c.start_kubelet()
    # The Node may still say Ready from before: kubelet's new checkpoint says it has started.
    procs.wait_until(
        f"kubelet's CPU manager checkpoint naming {policy}",
        lambda: checkpoint_policy(c) == policy,
        120,
        log=c.lay.log("kubelet"),
    )
    c.wait_node_ready(180)
