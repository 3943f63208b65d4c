"""What the cluster changes on this host besides its folder, and how it is undone: the one NAT
rule standing in for kube-proxy, the pods' processes (found below the runtime's shims, never by
cgroup) and kubelet's cgroups (``kre-cluster/kubepods``),
mounts below the cluster folder, the CNI bridge and its veths."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from pathlib import Path

from tests.support.cluster.layout import API_SERVICE_IP, APISERVER_PORT, BRIDGE, CGROUP_ROOT

CGROUPFS = Path("/sys/fs/cgroup")
_RULE_COMMENT = "kre-cluster: the kubernetes service, as kube-proxy would route it"


def node_ip() -> str:
    """The address of the interface of the default route (kubelet refuses a loopback one)."""
    out = subprocess.run(
        ["ip", "-4", "-o", "route", "get", "192.0.2.254"],
        capture_output=True,
        text=True,
        timeout=10,
        check=True,
    ).stdout.split()
    return out[out.index("src") + 1]


def _nat_rule(ip: str) -> list[str]:
    return [
        "OUTPUT",
        "-d",
        f"{API_SERVICE_IP}/32",
        "-p",
        "tcp",
        "--dport",
        "443",
        "-m",
        "comment",
        "--comment",
        _RULE_COMMENT,
        "-j",
        "DNAT",
        "--to-destination",
        f"{ip}:{APISERVER_PORT}",
    ]


def add_service_rule(ip: str) -> None:
    """Pods on the host network (the enforcer) reach the API server at its service address,
    as the in-cluster configuration tells them: one DNAT rule in the host's OUTPUT chain."""
    rule = _nat_rule(ip)
    present = subprocess.run(["iptables", "-t", "nat", "-C", *rule], capture_output=True)
    if present.returncode != 0:
        subprocess.run(["iptables", "-t", "nat", "-A", *rule], check=True, capture_output=True)


def service_rules() -> list[str]:
    out = subprocess.run(["iptables", "-t", "nat", "-S", "OUTPUT"], capture_output=True, text=True)
    return [ln for ln in out.stdout.splitlines() if _RULE_COMMENT in ln and ln.startswith("-A ")]


def remove_service_rules() -> None:
    for line in service_rules():
        argv = _split_rule(line[3:])
        subprocess.run(["iptables", "-t", "nat", "-D", *argv], capture_output=True)


def _split_rule(text: str) -> list[str]:
    import shlex

    return shlex.split(text)


def _hierarchies() -> list[Path]:
    return [p for p in CGROUPFS.iterdir() if p.is_dir() and (p / "cgroup.procs").exists()]


def descendants(roots: set[int]) -> set[int]:
    """Every process below ``roots`` (the containers under the shims: the shim is their
    subreaper), from the parent links in /proc."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        children.setdefault(ppid, []).append(int(entry.name))
    found: set[int] = set()
    todo = list(roots)
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in found:
                found.add(child)
                todo.append(child)
    return found


def kill_all(pids: set[int], timeout: float = 15.0) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and any(Path(f"/proc/{p}").exists() for p in pids):
        for pid in pids:
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, os.WNOHANG)
        time.sleep(0.1)


def mounts_under(folder: Path) -> list[str]:
    """Mount points at or below ``folder``, deepest first."""
    prefix = str(folder.resolve())
    points: list[str] = []
    with open("/proc/self/mountinfo") as f:
        for line in f:
            point = line.split()[4].replace("\\040", " ")
            if point == prefix or point.startswith(prefix + "/"):
                points.append(point)
    return sorted(set(points), key=len, reverse=True)


def unmount_under(folder: Path) -> list[str]:
    """Unmount everything below ``folder``; returns what could not be unmounted."""
    for _ in range(3):
        points = mounts_under(folder)
        if not points:
            return []
        for p in points:
            if subprocess.run(["umount", p], capture_output=True).returncode != 0:
                subprocess.run(["umount", "-l", p], capture_output=True)
    return mounts_under(folder)


def remove_bridge() -> None:
    """The CNI bridge and any veth still attached to it."""
    out = subprocess.run(
        ["ip", "-o", "link", "show", "master", BRIDGE], capture_output=True, text=True
    )
    for line in out.stdout.splitlines():
        name = line.split(":")[1].strip().split("@")[0]
        subprocess.run(["ip", "link", "del", name], capture_output=True)
    subprocess.run(["ip", "link", "del", BRIDGE], capture_output=True)


def bridge_exists() -> bool:
    return Path(f"/sys/class/net/{BRIDGE}").exists()


def _propagation(point: str) -> str | None:
    """'shared', 'slave' or 'private' for the mount at ``point``; None when none is there."""
    with open("/proc/self/mountinfo") as f:
        for line in f:
            fields = line.split()
            if fields[4] == point:
                optional = fields[6 : fields.index("-")]
                if any(o.startswith("shared:") for o in optional):
                    return "shared"
                if any(o.startswith("master:") for o in optional):
                    return "slave"
                return "private"
    return None


def share_sys() -> bool:
    """The enforcer's pod mounts /sys and /sys/fs/cgroup with `mountPropagation:
    HostToContainer`, which the runtime allows only from a shared or slave mount: what systemd
    makes every mount on a real node. Here (no systemd) /sys is private: make it shared, as a
    node has it. Returns whether it changed anything (down() puts it back then)."""
    if _propagation("/sys") == "private":
        subprocess.run(["mount", "--make-rshared", "/sys"], check=True, capture_output=True)
        return True
    return False


def unshare_sys() -> None:
    subprocess.run(["mount", "--make-rprivate", "/sys"], capture_output=True)


def make_cgroup_root() -> None:
    """kubelet's cgroupRoot must exist in every hierarchy before it starts (as a node's
    systemd slice would). A cgroup v1 cpuset starts empty: it gets its parent's CPUs and
    memory nodes."""
    for h in _hierarchies():
        top = h / CGROUP_ROOT
        top.mkdir(exist_ok=True)
        if (h / "cpuset.cpus").exists():
            for f in ("cpuset.cpus", "cpuset.mems"):
                if not (top / f).read_text().strip():
                    (top / f).write_text((h / f).read_text())


def remove_cgroups(timeout: float = 20.0) -> list[str]:
    """rmdir the cgroup trees kubelet made (its cgroupRoot, ``kubepods`` below), deepest first;
    returns those that stayed
    (a cgroup that still holds a process is never emptied here)."""
    deadline = time.monotonic() + timeout
    while True:
        left: list[str] = []
        for h in _hierarchies():
            top = h / CGROUP_ROOT
            if not top.is_dir():
                continue
            dirs = sorted(
                (p for p in top.rglob("*") if p.is_dir()),
                key=lambda p: len(p.parts),
                reverse=True,
            )
            for d in [*dirs, top]:
                try:
                    d.rmdir()
                except FileNotFoundError:
                    pass
                except OSError:
                    left.append(str(d))
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.5)


LOG_LINKS = Path("/var/log/containers")


def remove_log_links(pod_logs: Path, folder: Path = LOG_LINKS, *, made: bool = False) -> None:
    """kubelet's links in /var/log/containers (a fixed path) into the cluster's pod logs; the
    folder too when kubelet ``made`` it and nothing else is left in it."""
    if not folder.is_dir():
        return
    for link in folder.iterdir():
        with contextlib.suppress(OSError):
            if link.is_symlink() and os.readlink(link).startswith(str(pod_logs) + "/"):
                link.unlink()
    if made:
        with contextlib.suppress(OSError):
            folder.rmdir()


def processes_naming(folder: Path) -> list[int]:
    """Processes whose command line names ``folder`` (every daemon of the cluster does), and
    those below the cluster's shims."""
    needle = (str(folder) + "/").encode()
    found: set[int] = set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            if needle in (entry / "cmdline").read_bytes():
                found.add(int(entry.name))
        except OSError:
            continue
    return sorted(found | descendants(found))


def cgroups_left() -> list[str]:
    return [str(h / CGROUP_ROOT) for h in _hierarchies() if (h / CGROUP_ROOT).exists()]


def log_links_into(pod_logs: Path, folder: Path = LOG_LINKS) -> list[str]:
    if not folder.is_dir():
        return []
    found = []
    for link in folder.iterdir():
        with contextlib.suppress(OSError):
            if link.is_symlink() and os.readlink(link).startswith(str(pod_logs) + "/"):
                found.append(str(link))
    return found
