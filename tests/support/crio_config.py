"""The files of a private CRI-O (test tooling): crio.conf, storage.conf, the signature policy and
the runc wrapper, all below one folder; shared by the runtime matrix's PrivateCrio and the
cluster bed's CRI-O (``make cluster-up RUNTIME=crio``).

Everything CRI-O would read from /etc or keep in /var is pointed into ``folder``: its storage
root (``root``) and run root (``state``), logs, namespaces, exit files, runc root, NRI folders
(attach sockets go to a short folder of their own, ``attach_dir``); the cgroupfs cgroup manager
(a container's cgroup is ``<parent>/crio-<id>``), conmon in the pod's cgroup; NRI on, with
containerd's defaults (5 s to register, 2 s a request). runc runs behind
tests/support/crio_runc.py, which does what containerd's ``restrict_oom_score_adj`` does (this
machine lets no process lower its oom_score_adj).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from pathlib import Path

from tests.support.containerd_config import toml_str as q

CONMON = "/usr/bin/conmon"
RUNC_WRAPPER = Path(__file__).with_name("crio_runc.py")
FOLDERS = (
    "crio.conf.d",
    "registries.conf.d",
    "nri/plugins",
    "nri/conf.d",
    "exits",
    "ns",
    "logs",
)


# conmon's attach sockets, <dir>/<64-hex id>/attach: a unix socket path holds at most 107 bytes,
# so they live in a short folder of their own, named after the bed's folder (a socket below a
# pytest folder failed critest's attach spec: "connect: invalid argument").
ATTACH_ROOT = Path("/run/kre-attach")


def attach_dir(folder: Path) -> Path:
    """The attach sockets' folder of the CRI-O in ``folder``."""
    return ATTACH_ROOT / hashlib.sha256(str(folder).encode()).hexdigest()[:12]


def write_support_files(folder: Path, driver: str, runc: str) -> Path:
    """The folders, storage.conf, policy.json and the runc wrapper below ``folder``; returns
    the wrapper's path (crio.conf's ``runtime_path``)."""
    for d in FOLDERS:
        (folder / d).mkdir(parents=True, exist_ok=True)
    attach_dir(folder).mkdir(parents=True, exist_ok=True)
    (folder / "storage.conf").write_text(storage_conf(folder, driver))
    (folder / "policy.json").write_text('{"default": [{"type": "insecureAcceptAnything"}]}\n')
    wrapper = folder / "runc-restricted"
    wrapper.write_text(f'#!/bin/sh\nexec /usr/bin/python3 -I {RUNC_WRAPPER} {runc} "$@"\n')
    wrapper.chmod(0o755)
    return wrapper


def storage_conf(folder: Path, driver: str) -> str:
    """containers-storage's configuration: CRI-O's (and skopeo's, importing into it) store."""
    return (
        f'[storage]\ndriver = "{driver}"\nrunroot = {q(str(folder / "state"))}\n'
        f"graphroot = {q(str(folder / 'root'))}\n"
    )


def storage_reference(folder: Path, driver: str, image: str) -> str:
    """skopeo's name of ``image`` in the store of the CRI-O in ``folder``."""
    return f"containers-storage:[{driver}@{folder / 'root'}+{folder / 'state'}]{image}"


def crio_conf(
    folder: Path,
    *,
    socket: Path,
    nri_socket: Path,
    driver: str,
    pinns: str,
    runc_wrapper: Path,
    pause_image: str,
    cni_conf: Path,
    cni_bins: Sequence[Path],
    cdi_dir: Path,
    header: str,
) -> str:
    bins = ", ".join(q(str(b)) for b in cni_bins)
    return f"""\
# {header}
[crio]
root = {q(str(folder / "root"))}
runroot = {q(str(folder / "state"))}
storage_driver = {q(driver)}
log_dir = {q(str(folder / "logs"))}
version_file = {q(str(folder / "state" / "version"))}
version_file_persist = {q(str(folder / "root" / "version"))}
clean_shutdown_file = {q(str(folder / "root" / "clean.shutdown"))}

[crio.api]
listen = {q(str(socket))}
stream_address = "127.0.0.1"
stream_port = "0"

[crio.runtime]
default_runtime = "runc"
cgroup_manager = "cgroupfs"
conmon_cgroup = "pod"
pinns_path = {q(pinns)}
namespaces_dir = {q(str(folder / "ns"))}
container_exits_dir = {q(str(folder / "exits"))}
container_attach_socket_dir = {q(str(attach_dir(folder)))}
hooks_dir = []
selinux = false
apparmor_profile = ""
irqbalance_config_file = {q(str(folder / "irqbalance"))}
cdi_spec_dirs = [{q(str(cdi_dir))}]

[crio.runtime.runtimes.runc]
runtime_path = {q(str(runc_wrapper))}
runtime_type = "oci"
runtime_root = {q(str(folder / "runc"))}
monitor_path = {q(CONMON)}
monitor_cgroup = "pod"

[crio.image]
pause_image = {q(pause_image)}
# The pause image here is a busybox shell (tests.support.images.PAUSE), not upstream's /pause:
# with pause_command empty, CRI-O runs the image's entrypoint in a pod's infra container.
pause_command = ""
signature_policy = {q(str(folder / "policy.json"))}

[crio.network]
network_dir = {q(str(cni_conf))}
plugin_dirs = [{bins}]

[crio.nri]
enable_nri = true
nri_listen = {q(str(nri_socket))}
nri_plugin_dir = {q(str(folder / "nri" / "plugins"))}
nri_plugin_config_dir = {q(str(folder / "nri" / "conf.d"))}
nri_plugin_registration_timeout = "5s"
nri_plugin_request_timeout = "2s"

[crio.metrics]
enable_metrics = false
"""


def crio_argv(crio: Path, folder: Path, log_level: str = "info") -> list[str]:
    """crio with its configuration from ``folder`` and none from /etc (its own flags: it reads
    neither CONTAINERS_REGISTRIES_CONF nor /etc's file with them given)."""
    return [
        str(crio),
        "--config",
        str(folder / "crio.conf"),
        "--config-dir",
        str(folder / "crio.conf.d"),
        "--log-level",
        log_level,
        "--registries-conf",
        str(folder / "registries.conf"),
        "--registries-conf-dir",
        str(folder / "registries.conf.d"),
    ]


def crio_env(folder: Path, base: dict[str, str]) -> dict[str, str]:
    return dict(
        base,
        CONTAINERS_STORAGE_CONF=str(folder / "storage.conf"),
        CONTAINERS_REGISTRIES_CONF=str(folder / "registries.conf"),
    )
