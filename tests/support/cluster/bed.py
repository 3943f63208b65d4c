"""The single-node cluster: up, down, kubelet restarted; used by `make cluster-*` and the tests.

``Cluster(mode="nri"|"relay").up()`` builds what is missing (tests/beds/cluster/build.sh),
starts etcd, the API server, the controller manager, the scheduler, a private runtime
(containerd 2.x, or CRI-O with ``runtime="crio"``: tests/support/cluster/runtime.py) and
kubelet (restarted after it exits, as systemd does on a node: ``kubelet_exits()`` lists each
exit), then deploys the webhook and the enforcer from their images and waits until the node is
Ready and both serve. In relay mode the node is set up as docs/install.md tells an operator: the
link from the relay path to the runtime's socket before kubelet starts (Step 3), kubelet pointed
at the relay path (Step 4), the reconnect service that restarts kubelet when the enforcer's
relay replaces the link. ``down()`` removes every process, mount, cgroup, network device and
file it made; only ``logs/`` stays, for reading after a failure.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from tests.support.cluster import components as comp
from tests.support.cluster import configs, deploy, node, procs
from tests.support.cluster import runtime as rt
from tests.support.cluster.kube import Kubectl
from tests.support.cluster.layout import (
    API_SERVICE_IP,
    MODES,
    NO_ENFORCER,
    NODE_NAME,
    PAUSE_IMAGE,
    REPO,
    RUNTIMES,
    Layout,
    Ports,
    default_folder,
)
from tests.support.cluster.pki import ClusterPKI
from tests.support.cluster.procs import ClusterError

BUILD_SCRIPT = REPO / "tests" / "beds" / "cluster" / "build.sh"
RECONNECT_SCRIPT = REPO / "tests" / "beds" / "cluster" / "reconnect.sh"
# kubelet runs under the bed's stand-in for systemd: restarted 10 s after it exits, as kubeadm's
# kubelet.service says (Restart=always, RestartSec=10).
SUPERVISE_SCRIPT = REPO / "tests" / "beds" / "cluster" / "supervise.sh"
KUBELET_RESTART_SECONDS = 10
# Stopped in this order by down() (kubelet first: it would restart what the others stop).
COMPONENTS = (
    "reconnect",
    "kubelet",
    "kube-scheduler",
    "kube-controller-manager",
    "kube-apiserver",
    "etcd",
)


def say(text: str) -> None:
    print(f"[cluster {time.strftime('%H:%M:%S')}] {text}", file=sys.stderr, flush=True)


def build() -> dict[str, Path]:
    """Run build.sh (cached: builds only what is missing); component -> bin folder."""
    started = time.monotonic()
    out = subprocess.run([str(BUILD_SCRIPT)], stdout=subprocess.PIPE, text=True, timeout=3 * 3600)
    if out.returncode != 0:
        raise ClusterError(f"{BUILD_SCRIPT} failed (exit {out.returncode}); its output is above")
    found = dict(line.split("=", 1) for line in out.stdout.splitlines() if "=" in line)
    say(f"builds ready in {time.monotonic() - started:.0f} s: {found}")
    return {k: Path(v) for k, v in found.items() if k != "kubernetes_version"}


class Cluster:
    """One single-node cluster in ``root`` (default ``.cluster/``)."""

    def __init__(
        self,
        mode: str = "nri",
        root: Path | None = None,
        *,
        baseline: bool = False,
        ports: Ports | None = None,
        runtime: str = "containerd",
    ) -> None:
        """``baseline``: the bench's node without the webhook and the enforcer (mode
        ``none``: kubelet talks to containerd, no admission webhook). ``ports``: the control
        plane's, when it runs beside the host's cluster (the VM node's)."""
        if not (mode in MODES or (baseline and mode == NO_ENFORCER)):
            raise ValueError(f"MODE must be one of {', '.join(MODES)}, not {mode!r}")
        if runtime not in RUNTIMES:
            raise ValueError(f"RUNTIME must be one of {', '.join(RUNTIMES)}, not {runtime!r}")
        self.mode = mode
        self.runtime = runtime
        self.lay = Layout((root or default_folder()).resolve(), ports or Ports(), runtime)
        self.kubectl = Kubectl(self.lay)
        self.bins: dict[str, Path] = {}
        self.node_ip = ""
        self.timings: dict[str, float] = {}

    # -- record of a running cluster -----------------------------------------------------------

    @property
    def record_file(self) -> Path:
        return self.lay.run / "cluster.json"

    def _save_record(self) -> None:
        rec = {
            "mode": self.mode,
            "runtime": self.runtime,
            "node_ip": self.node_ip,
            "bins": {k: str(v) for k, v in self.bins.items()},
        }
        self.record_file.write_text(json.dumps(rec, indent=2) + "\n")

    @classmethod
    def attach(cls, root: Path | None = None) -> Cluster:
        """The cluster that `up()` left running in ``root``."""
        lay = Layout((root or default_folder()).resolve())
        rec: dict[str, Any] = json.loads((lay.run / "cluster.json").read_text())
        c = cls(
            rec["mode"],
            lay.root,
            baseline=rec["mode"] == NO_ENFORCER,
            runtime=rec.get("runtime", "containerd"),
        )
        c.node_ip = rec["node_ip"]
        c.bins = {k: Path(v) for k, v in rec["bins"].items()}
        return c

    # -- up -------------------------------------------------------------------------------------

    def _step(self, name: str, started: float) -> None:
        self.timings[name] = time.monotonic() - started
        say(f"{name}: {self.timings[name]:.1f} s")

    def up(self) -> None:
        """Start everything and deploy our programs; on failure, everything started is stopped
        again (the logs stay)."""
        if self.record_file.exists() or any(procs.pid_of(self.lay, c) for c in COMPONENTS):
            say("a cluster is already in this folder: taking it down first")
            self.down()
        t0 = time.monotonic()
        try:
            self._up()
        except BaseException:
            say(f"cluster-up failed; logs in {self.lay.logs}; taking down what was started")
            self.down()
            raise
        self._step("cluster up (total)", t0)

    def _up(self) -> None:
        t = time.monotonic()
        self.bins = build()
        self._step("builds (cached after the first run)", t)
        lay = self.lay
        for d in (lay.root, lay.bin, lay.config, lay.run, lay.logs, lay.pod_logs, lay.cni_conf):
            d.mkdir(parents=True, exist_ok=True)
        shutil.copy2(self.bins["kubernetes"] / "kubectl", lay.kubectl)
        self.node_ip = node.node_ip()
        self._save_record()

        t = time.monotonic()
        self._write_configs()
        self.start_control_plane()
        self._step("control plane", t)

        t = time.monotonic()
        self.start_runtime()
        self._step(self.runtime, t)
        t = time.monotonic()
        images = deploy.build_images() if self.mode != NO_ENFORCER else {}
        deploy.build_pause_image(self.bins["pause"])
        rt.import_images(lay, self.bins, [PAUSE_IMAGE, *images.values()], self.snapshotter)
        self._step("images built and imported", t)

        t = time.monotonic()
        if self.mode == "relay":
            self.start_fallback_and_reconnect()
        self.start_kubelet()
        self.wait_node_ready(240)
        self._step("kubelet and node Ready", t)

        if self.mode == NO_ENFORCER:
            return
        t = time.monotonic()
        deploy.deploy(
            lay, self.kubectl, self.mode, Path(sys.executable).parent / "resource-webhook"
        )
        self.wait_programs()
        self._step(f"webhook and enforcer ({self.mode}) serving", t)

    def start_control_plane(self, *, service_rule: bool = True) -> None:
        """etcd, the API server (waited for), the service rule (not for a node whose pods do
        not run on this host), the controller manager and the scheduler."""
        lay = self.lay
        procs.start(lay, "etcd", comp.etcd_argv(self.bins, lay))
        procs.wait_until("etcd", lambda: comp.etcd_healthy(lay), 60, log=lay.log("etcd"))
        procs.start(lay, "kube-apiserver", comp.apiserver_argv(self.bins, lay, self.node_ip))
        procs.wait_until(
            "the API server's /readyz",
            lambda: (
                self.kubectl.run("get", "--raw=/readyz", check=False, timeout=10).returncode == 0
            ),
            180,
            log=lay.log("kube-apiserver"),
        )
        if service_rule:
            node.add_service_rule(self.node_ip)
        procs.start(lay, "kube-controller-manager", comp.controller_manager_argv(self.bins, lay))
        procs.start(lay, "kube-scheduler", comp.scheduler_argv(self.bins, lay))

    def start_fallback_and_reconnect(self) -> None:
        """Relay mode, docs/install.md Step 3: the fallback link, in place before kubelet
        starts (as tmpfiles.d makes it at boot), and the reconnect service."""
        lay = self.lay
        lay.relay_dir.mkdir(parents=True, exist_ok=True)
        if not lay.relay_socket.exists() and not lay.relay_socket.is_symlink():
            lay.relay_socket.symlink_to(lay.runtime_socket)
        procs.start(
            lay,
            "reconnect",
            [
                str(RECONNECT_SCRIPT),
                str(lay.relay_socket),
                sys.executable,
                "-m",
                "tests.support.cluster",
                "restart-kubelet",
                f"--dir={lay.root}",
            ],
            env=dict(os.environ, PYTHONPATH=str(REPO)),
        )

    def write_kubelet_config(self, cpu_manager: str = "none") -> None:
        lay = self.lay
        endpoint = lay.relay_socket if self.mode == "relay" else lay.runtime_socket
        (lay.config / "kubelet.yaml").write_text(
            configs.kubelet_config(lay, f"unix://{endpoint}", cpu_manager)
        )

    def _write_configs(self) -> None:
        lay = self.lay
        ClusterPKI(lay.pki).ensure(NODE_NAME, self.node_ip, API_SERVICE_IP, clients=comp.CLIENTS)
        server = f"https://127.0.0.1:{lay.ports.apiserver}"
        for name, cert in comp.KUBECONFIGS.items():
            text = configs.kubeconfig(
                server, lay.pki / "ca.crt", lay.pki / f"{cert}.crt", lay.pki / f"{cert}.key", name
            )
            target = lay.kubeconfig if name == "admin" else lay.config / f"{name}.kubeconfig"
            target.write_text(text)
            target.chmod(0o600)
        self.write_kubelet_config()
        (lay.cni_conf / "10-kre-pods.conflist").write_text(configs.cni_conflist(lay))

    @property
    def snapshotter(self) -> str:
        from tests.support.containerd_config import overlayfs_works

        return "overlayfs" if overlayfs_works(self.lay.root) else "native"

    def start_runtime(self) -> None:
        """The runtime (containerd or CRI-O), waited for until its CRI and NRI sockets serve."""
        rt.start(self.lay, self.bins, self.snapshotter)

    # -- kubelet ----------------------------------------------------------------------------------

    @property
    def shared_marker(self) -> Path:  # /sys was made shared by us: down() makes it private
        return self.lay.run / "sys-made-shared"

    @property
    def log_links_marker(self) -> Path:
        return self.lay.run / "log-links-made"

    @property
    def kubelet_marker(self) -> Path:
        return self.lay.run / "kubelet.started"

    @property
    def kubelet_started_file(self) -> Path:  # touched by supervise.sh at each start of kubelet
        return self.lay.run / "kubelet.last-start"

    def start_kubelet(self) -> None:
        if not self.bins:
            raise ClusterError("no record of the builds: is the cluster up?")
        if not Path("/sys/fs/cgroup/cgroup.controllers").exists():
            say(
                "WARNING: this host is cgroup v1; kubelet runs with failCgroupV1: false "
                "(Kubernetes 1.35+ refuses cgroup v1 otherwise, KEP-5573; cgroup v1 is deprecated)"
            )
        if not self.kubelet_marker.exists() and not node.LOG_LINKS.exists():
            self.log_links_marker.touch()  # kubelet will make /var/log/containers
        self.kubelet_marker.touch()
        node.make_cgroup_root()
        if node.share_sys():
            self.shared_marker.touch()
        procs.start(
            self.lay,
            "kubelet",
            [
                str(SUPERVISE_SCRIPT),
                str(KUBELET_RESTART_SECONDS),
                str(self.kubelet_started_file),
                *comp.kubelet_argv(self.bins, self.lay, self.node_ip),
            ],
        )

    def kubelet_exits(self) -> list[str]:
        """The supervisor's line for each time kubelet exited on its own (its log's
        "supervise: exited with status N; restart K in 10 s"), oldest first."""
        try:
            text = self.lay.log("kubelet").read_text(errors="replace")
        except OSError:
            return []
        return [line for line in text.splitlines() if " supervise: exited with status " in line]

    def stop_kubelet(self) -> None:
        procs.stop(self.lay, "kubelet")

    def restart_kubelet(self) -> None:
        self.stop_kubelet()
        self.start_kubelet()

    def node_ready(self) -> bool:
        out = self.kubectl.run("get", "node", NODE_NAME, "-o", "json", check=False, timeout=15)
        if out.returncode != 0:
            return False
        conds = json.loads(out.stdout)["status"].get("conditions", [])
        return any(c["type"] == "Ready" and c["status"] == "True" for c in conds)

    def wait_node_ready(self, timeout: float = 180) -> None:
        procs.wait_until(
            f"node {NODE_NAME} Ready", self.node_ready, timeout, log=self.lay.log("kubelet")
        )

    # -- our programs ---------------------------------------------------------------------------

    def _rollout(self, kind: str, name: str) -> bool:
        return (
            self.kubectl.run(
                "-n",
                "resource-enforcer",
                "rollout",
                "status",
                f"{kind}/{name}",
                "--timeout=5s",
                check=False,
                timeout=30,
            ).returncode
            == 0
        )

    def _daemonset_ready(self) -> bool:
        """Its pod on the node is ready (`rollout status` alone passes while no pod is wanted
        yet, before the DaemonSet controller has seen the node)."""
        ds = self.kubectl.json("-n", "resource-enforcer", "get", "daemonset", "resource-enforcer")
        st = ds.get("status", {})
        return bool(st.get("desiredNumberScheduled", 0) >= 1 and st.get("numberReady", 0) >= 1)

    def relay_serving(self) -> bool:
        p = self.lay.relay_socket
        return p.is_socket() and not p.is_symlink()

    def wait_programs(self, timeout: float = 300) -> None:
        """Both Deployments' pods ready; in relay mode, the relay serving and kubelet restarted
        onto it (the node Ready again)."""
        procs.wait_until(
            "the enforcer DaemonSet ready",
            lambda: self._daemonset_ready() and self._rollout("daemonset", "resource-enforcer"),
            timeout,
            log=self.lay.log("kubelet"),
        )
        if self.mode == "relay":
            procs.wait_until("the relay socket", self.relay_serving, 60)
            # The reconnect service restarts kubelet within ~2 s of the socket appearing.
            procs.wait_until(
                "kubelet restarted onto the relay",
                lambda: self.kubelet_on_relay() and self.node_ready(),
                120,
                log=self.lay.log("reconnect"),
            )
        procs.wait_until(
            "the webhook Deployment available",
            lambda: self._rollout("deployment", "resource-webhook"),
            timeout,
            log=self.lay.log("kubelet"),
        )

    def kubelet_on_relay(self) -> bool:
        """kubelet was (re)started after the relay's socket replaced the fallback link, so its
        connection goes through the relay (the supervisor touches its file as kubelet starts)."""
        if procs.pid_of(self.lay, "kubelet") is None or not self.relay_serving():
            return False
        started = self.kubelet_started_file.stat().st_mtime
        return started > self.lay.relay_socket.lstat().st_mtime

    # -- down -----------------------------------------------------------------------------------

    def down(self) -> list[str]:
        """Stop and remove everything; returns what could not be removed (empty: all gone)."""
        lay = self.lay
        for name in COMPONENTS[:2]:
            procs.stop(lay, name)
        # The pods' processes, then the runtime's shims (or conmons), then the runtime.
        shims = rt.monitor_pids(lay)
        node.kill_all(node.descendants(shims))
        node.kill_all(shims)
        procs.stop(lay, rt.process_name(lay))
        rt.forget(lay)
        for name in COMPONENTS[2:]:
            procs.stop(lay, name)
        node.remove_service_rules()
        if self.shared_marker.exists():
            node.unshare_sys()
        node.remove_log_links(lay.pod_logs, made=self.log_links_marker.exists())
        problems = [f"still mounted: {m}" for m in node.unmount_under(lay.root)]
        node.remove_bridge()
        if node.bridge_exists():
            problems.append("the CNI bridge is still there")
        if self.kubelet_marker.exists():  # kubelet made them: they go with it
            problems += [f"cgroup left: {c}" for c in node.remove_cgroups()]
        if lay.root.exists() and not problems:
            for entry in lay.root.iterdir():
                if entry != lay.logs:
                    if entry.is_dir() and not entry.is_symlink():
                        shutil.rmtree(entry)
                    else:
                        entry.unlink()
        problems += self.leftovers()
        for p in problems:
            say(p)
        return problems

    def leftovers(self) -> list[str]:
        """Anything of the cluster still on the host, checked afresh: a process whose command
        line names the cluster's folder (components, shims, the reconnect service) or a child
        of a shim, a mount below the folder, the NAT rule, the bridge, a cgroup, a
        /var/log/containers link into the folder, the folder itself but for its logs."""
        lay = self.lay
        found = [f"process {p} still runs" for p in node.processes_naming(lay.root)]
        found += [f"still mounted: {m}" for m in node.mounts_under(lay.root)]
        if node.service_rules():
            found.append("the NAT rule for the kubernetes service is still there")
        if node.bridge_exists():
            found.append("the CNI bridge is still there")
        found += [f"cgroup left: {c}" for c in node.cgroups_left()]
        found += [f"log link left: {p}" for p in node.log_links_into(lay.pod_logs)]
        if lay.root.exists():
            found += [f"left in the folder: {e}" for e in lay.root.iterdir() if e != lay.logs]
        return found
