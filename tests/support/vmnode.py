"""A Kubernetes node in the cgroup v2 VM: the control plane on the host, kubelet in the VM.

The host runs etcd, the API server, the controller manager and the scheduler of the cached
v1.37.2 build (tests/beds/cluster/build.sh) with ports of their own (``PORTS``: never the host
cluster's) in a folder of their own, without the service rule (no pod runs on this host); the
API server's certificate also names 10.0.2.2, the host as the guest sees it on QEMU's user
network. The VM (tests.support.vm, 2 sockets, 2 NUMA nodes, SMT, cgroup v2 only) runs
containerd 2.4 with the bed's configuration (tests.support.cluster.configs, the CNI bridge
without portmap: the image has no iptables), kubelet with the cgroupfs driver as containerd's
runc, CPU manager ``none`` and no cgroup v1 override, and our enforcer as an NRI plugin run
from the checkout's virtual environment with the admin's kubeconfig (not the DaemonSet: there
is no image in the VM), ``dra.enabled`` in its configuration. kubelet and the CNI plugins are
shared from the host by 9p at their own paths; the pause and busybox images are copied in and
imported with ctr. ``down()`` stops the VM and the control plane; only ``logs/`` stays.

Given a booted VM (the session's, tests.support.vm_background, booted with kubelet's and the CNI
plugins' folders shared), the node is made in it instead of booting one of its own, and
``down()`` leaves that VM running for its owner.
"""

from __future__ import annotations

import contextlib
import io
import json
import shlex
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from tests.support import images
from tests.support.cluster import components as comp
from tests.support.cluster import configs, deploy, procs
from tests.support.cluster.bed import Cluster, build, say
from tests.support.cluster.layout import (
    API_SERVICE_IP,
    CGROUP_ROOT,
    CNI_BIN_DIR,
    NODE_NAME,
    PAUSE_IMAGE,
    Layout,
    Ports,
)
from tests.support.cluster.node import node_ip
from tests.support.cluster.pki import ClusterPKI
from tests.support.cluster.procs import ClusterError
from tests.support.slow import scaled
from tests.support.vm import VM

GATEWAY = "10.0.2.2"  # the host, from the guest (QEMU's user network)
GUEST_IP = "10.0.2.15"  # the guest's address on it
PORTS = Ports(
    etcd_client=23791, etcd_peer=23801, apiserver=26443, controller_manager=20257, scheduler=20259
)
GUEST = Layout(Path("/var/lib/kre-node"))  # the node's folder in the VM
CONTROL_PLANE = ("kube-scheduler", "kube-controller-manager", "kube-apiserver", "etcd")
CONTROLLERS = "'+cpuset +cpu +io +memory +pids +hugetlb'"
POD_ROOT = f"/sys/fs/cgroup/{CGROUP_ROOT}"  # kubelet's cgroupRoot
PKI_FILES = (
    "ca.crt",
    "kubelet.crt",
    "kubelet.key",
    "kubelet-client.crt",
    "kubelet-client.key",
    "admin.crt",
    "admin.key",
)
ENFORCER_CONFIG = """\
policy: {name: static, reservedCPUs: "0"}
dra: {enabled: true, mode: individual}
"""


class VMNode:
    """The control plane in ``root`` on the host, the node in the VM (its run folder
    ``root/vm``)."""

    def __init__(self, root: Path, vm: VM | None = None) -> None:
        self.cluster = Cluster("nri", root, ports=PORTS)
        self.lay = self.cluster.lay
        self.kubectl = self.cluster.kubectl
        self.vm: VM | None = vm
        self.owns_vm = vm is None
        self.timings: dict[str, float] = {}

    def _step(self, name: str, started: float) -> None:
        self.timings[name] = time.monotonic() - started
        say(f"vm node: {name}: {self.timings[name]:.0f} s")

    # -- up ---------------------------------------------------------------------------------

    def up(self) -> None:
        t0 = time.monotonic()
        try:
            self._up()
        except BaseException:
            say(f"vm node: up failed; logs in {self.lay.logs}; taking down what was started")
            self.down()
            raise
        self._step("up (total)", t0)

    def _up(self) -> None:
        t = time.monotonic()
        bins = build()
        self.cluster.bins = bins
        lay = self.lay
        for d in (lay.root, lay.bin, lay.config, lay.run, lay.logs, lay.cni_conf):
            d.mkdir(parents=True, exist_ok=True)
        shutil.copy2(bins["kubernetes"] / "kubectl", lay.kubectl)
        self.cluster.node_ip = node_ip()
        ClusterPKI(lay.pki).ensure(
            NODE_NAME, self.cluster.node_ip, API_SERVICE_IP, clients=comp.CLIENTS,
            extra_ips=(GATEWAY,),
        )  # fmt: skip
        self.cluster._write_configs()  # the host components' kubeconfigs (127.0.0.1)
        self.cluster.start_control_plane(service_rule=False)
        self._step("control plane on the host", t)

        t = time.monotonic()
        if self.vm is None:
            self.vm = VM.up(lay.root / "vm", extra_shares=(bins["kubernetes"], Path(CNI_BIN_DIR)))
            self._step("VM booted", t)
        else:  # the session's VM: booted with the node's programs shared in
            missing = self.guest(f"test -x {bins['kubernetes'] / 'kubelet'} || echo missing")
            if missing.strip():
                raise ClusterError(f"the given VM does not share {bins['kubernetes']}")

        self.start_node()

    def start_node(self) -> None:
        """In the booted VM: the configuration and containerd, then the enforcer (its start
        under emulation is the longest step, so the images and kubelet come up meanwhile:
        kubelet finds the driver's registration socket when it starts), the images, kubelet;
        waited for: the node Ready and the driver's ResourceSlice."""
        bins = self.cluster.bins
        t = time.monotonic()
        self._configure_guest(bins)
        self._step("node configured, containerd up", t)
        t = time.monotonic()
        self.start_enforcer()
        self._import_images(bins)
        self._step("images imported", t)
        self._start_guest("kubelet", [*comp.kubelet_argv(bins, GUEST, GUEST_IP)])
        self._wait(f"node {NODE_NAME} Ready", self.cluster.node_ready, "kubelet")
        self._step("kubelet in the VM, node Ready", t)
        self._wait("the enforcer's ResourceSlice", self.slice_devices, "enforcer")
        self._step("enforcer (NRI, DRA) publishing", t)

    def _wait(self, what: str, check: Callable[[], object], component: str) -> None:
        try:
            procs.wait_until(what, check, scaled(300))
        except ClusterError as e:
            tail = self.guest_log(component)
            raise ClusterError(f"{e}\n--- {component} in the VM:\n{tail}") from e

    @classmethod
    def attach(cls, root: Path) -> VMNode:
        """The node that ``up`` left running in ``root`` (for trying it by hand)."""
        found = cls(root)
        found.cluster.bins = build()
        found.vm = VM.attach(root / "vm")
        return found

    def guest(self, command: str, timeout: float = 600) -> str:
        assert self.vm is not None
        return self.vm.exec(command, timeout=timeout, check=True).stdout

    def _configure_guest(self, bins: dict[str, Path]) -> None:
        assert self.vm is not None
        vm, lay, g = self.vm, self.lay, GUEST
        files = {str(g.pki / n): ((lay.pki / n).read_bytes(), 0o600) for n in PKI_FILES}
        server = f"https://{GATEWAY}:{PORTS.apiserver}"
        for name, cert in (("kubelet", "kubelet-client"), ("admin", "admin")):
            text = configs.kubeconfig(
                server, g.pki / "ca.crt", g.pki / f"{cert}.crt", g.pki / f"{cert}.key", name
            )
            files[str(g.config / f"{name}.kubeconfig")] = (text.encode(), 0o600)
        endpoint = f"unix://{g.runtime_socket}"
        for path, text in (
            (g.config / "kubelet.yaml", configs.kubelet_config(g, endpoint, cgroup_v1=False)),
            (g.config / "containerd.toml", configs.containerd_config(g, "overlayfs")),
            (g.cni_conf / "10-kre-pods.conflist", configs.cni_conflist(g, portmap=False)),
            (g.config / "enforcer.yaml", ENFORCER_CONFIG),
        ):
            files[str(path)] = (text.encode(), 0o644)
        vm.put(files)
        # What a node's systemd slice and runc would have: the controllers on for the pods'
        # cgroup root (systemd enables only memory and pids at the top).
        dirs = " ".join(
            str(g.runtime_dir / d) for d in ("root", "state", "runc", "nri/plugins", "nri/conf.d")
        )
        self.guest(
            f"mkdir -p {dirs} {g.logs} {g.run} {g.pod_logs} {g.cdi_dir} && "
            f"echo {CONTROLLERS} >/sys/fs/cgroup/cgroup.subtree_control && "
            f"mkdir -p {POD_ROOT} && echo {CONTROLLERS} >{POD_ROOT}/cgroup.subtree_control"
        )
        self._start_guest("containerd", comp.containerd_argv(bins, g))
        deadline = time.monotonic() + scaled(60)
        while "yes" not in self.guest(
            f"test -S {g.runtime_socket} && test -S {g.nri_socket} && echo yes || true"
        ):
            if time.monotonic() > deadline:
                raise ClusterError(
                    f"containerd in the VM did not start: {self.guest_log('containerd')}"
                )
            time.sleep(2)

    def _import_images(self, bins: dict[str, Path]) -> None:
        assert self.vm is not None
        vm, g = self.vm, GUEST
        ctr = bins["containerd"] / "ctr"
        with tempfile.TemporaryDirectory(prefix="kre-vmnode-") as tmp:
            deploy.build_pause_image(bins["pause"])
            pause = Path(tmp) / "pause.tar"
            subprocess.run(
                ["podman", "save", "--format=docker-archive", f"--output={pause}", PAUSE_IMAGE],
                check=True, capture_output=True,
            )  # fmt: skip
            busybox = images.build_oci_archive(Path(tmp) / "busybox.oci.tar", images.BUSYBOX)
            vm.put({f"/tmp/{a.name}": (a.read_bytes(), 0o644) for a in (pause, busybox)})
            self.guest(
                " && ".join(
                    f"{ctr} --address={g.runtime_socket} --namespace=k8s.io images import "
                    f"--snapshotter=overlayfs /tmp/{a.name} && rm -f /tmp/{a.name}"
                    for a in (pause, busybox)
                )
            )

    def _start_guest(self, name: str, argv: list[str]) -> None:
        """Starts ``argv`` in the VM, detached, its output in the guest's ``logs/NAME.log``."""
        line = " ".join(shlex.quote(a) for a in argv)
        path = f"PATH={shlex.quote(str(Path(argv[0]).parent))}:/usr/sbin:/usr/bin:/sbin:/bin"
        # One simple command in the background (a list would keep ssh's output open).
        self.guest(
            f"cd /; {path} setsid {line} >>{GUEST.log(name)} 2>&1 </dev/null & "
            f"echo $! >{GUEST.pid_file(name)}"
        )

    def guest_log(self, name: str, lines: int = 40) -> str:
        assert self.vm is not None
        return self.vm.exec(f"tail -n {lines} {GUEST.log(name)}", timeout=60).stdout

    def start_enforcer(self) -> None:
        g = GUEST
        exe = Path(sys.executable).parent / "resource-enforcer"
        self._start_guest(
            "enforcer",
            [
                str(exe), "nri", f"--nri-socket={g.nri_socket}",
                f"--state-dir={g.enforcer_state}", f"--config={g.config / 'enforcer.yaml'}",
                "--metrics-address=", f"--node-name={NODE_NAME}",
                f"--kubeconfig={g.config / 'admin.kubeconfig'}",
                f"--kubelet-dir={g.kubelet_root}", f"--cdi-dir={g.cdi_dir}",
            ],
        )  # fmt: skip

    def slice_devices(self) -> list[str]:
        items = self.kubectl.json("get", "resourceslices")["items"]
        return sorted(
            d["name"]
            for s in items
            if s["spec"].get("nodeName") == NODE_NAME
            for d in s["spec"].get("devices", [])
        )

    # -- truth in the VM --------------------------------------------------------------------

    def container_cgroup(self, namespace: str, pod: str, container: str = "app") -> str:
        """The container's cgroup v2 folder in the VM, from the pod's status."""
        doc = self.kubectl.json("-n", namespace, "get", "pod", pod)
        uid = doc["metadata"]["uid"]
        cid = next(
            s["containerID"].split("://", 1)[1]
            for s in doc["status"]["containerStatuses"]
            if s["name"] == container
        )
        qos = doc["status"]["qosClass"].lower()
        pod_dir = f"pod{uid}"
        base = f"{POD_ROOT}/kubepods"
        parent = f"{base}/{pod_dir}" if qos == "guaranteed" else f"{base}/{qos}/{pod_dir}"
        return f"{parent}/{cid}"

    def read(self, path: str) -> str:
        assert self.vm is not None
        return self.vm.read(path).strip()

    # -- down -------------------------------------------------------------------------------

    def down(self) -> None:
        """The VM (every process of the node with it), then the control plane; the folder
        removed but for ``logs/`` (the guest's logs copied there first)."""
        vm = self.vm or (
            VM.attach(self.lay.root / "vm") if (self.lay.root / "vm" / "vm.json").exists() else None
        )
        if vm is not None and vm.pid() is not None:
            if not self.owns_vm:  # the node's programs go, the VM stays for its owner
                with contextlib.suppress(Exception):
                    files = " ".join(
                        str(GUEST.pid_file(n)) for n in ("kubelet", "enforcer", "containerd")
                    )
                    self.guest(
                        f'for p in {files}; do test -f "$p" && kill "$(cat "$p")"; done; true',
                        timeout=120,
                    )
            with contextlib.suppress(Exception):  # the logs, over one connection
                self.lay.logs.mkdir(parents=True, exist_ok=True)
                logs = subprocess.run(
                    vm.ssh_command(f"tar -c -C {GUEST.logs} ."), capture_output=True, timeout=120
                ).stdout
                with tarfile.open(fileobj=io.BytesIO(logs)) as tar:
                    for member in tar.getmembers():
                        found = tar.extractfile(member) if member.isfile() else None
                        if found is not None:
                            name = Path(member.name).name
                            (self.lay.logs / f"vm-{name}").write_bytes(found.read())
            if self.owns_vm:
                vm.down(poweroff=False)  # its disk is a throwaway overlay: no need to wait
        for name in CONTROL_PLANE:
            procs.stop(self.lay, name)
        if self.lay.root.exists():
            for entry in self.lay.root.iterdir():
                if entry != self.lay.logs:
                    if entry.is_dir() and not entry.is_symlink():
                        shutil.rmtree(entry, ignore_errors=True)
                    else:
                        entry.unlink()


def main(argv: list[str] | None = None) -> int:
    """``python -m tests.support.vmnode up|down DIR``: for trying the node by hand."""
    args = argv if argv is not None else sys.argv[1:]
    node = VMNode(Path(args[1]).resolve())
    if args[0] == "up":
        node.up()
        print(json.dumps(node.timings, indent=2))
    else:
        node.down()
    return 0


if __name__ == "__main__":
    sys.exit(main())
