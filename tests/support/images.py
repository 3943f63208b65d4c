"""Container images without a registry and without Docker.

There is no registry to pull from on a test machine, so we build OCI image archives ourselves:
an ``oci-layout`` file, an ``index.json`` whose manifest carries the
``io.containerd.image.name`` annotation (what ``ctr images import`` names the image after),
a manifest, a config and one gzip layer holding the host's static busybox plus applet symlinks.
The archives are byte-for-byte reproducible (fixed timestamps, owners and ordering), so the image
digests stay the same from run to run and a second import is a no-op.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import platform
import shutil
import subprocess
import tarfile
from dataclasses import dataclass
from pathlib import Path

BUSYBOX_IMAGE = "docker.io/library/busybox:local"
PAUSE_IMAGE = "registry.k8s.io/pause:local"

# Used when the busybox binary cannot list its applets; enough for tests and the demo.
_FALLBACK_APPLETS = (
    "cat", "echo", "env", "false", "grep", "head", "id", "ls", "mkdir", "nproc", "ps", "rm",
    "sh", "sleep", "tail", "taskset", "test", "top", "touch", "true", "wc",
)  # fmt: skip

_PATH_ENV = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
_PASSWD = (
    "root:x:0:0:root:/root:/bin/sh\n"
    "www-data:x:33:33:www-data:/var/www:/bin/sh\n"
    "user1000:x:1000:1000::/:/bin/sh\n"
    "nobody:x:65534:65534::/:/bin/false\n"
)
_GROUP = (
    "root:x:0:\nwww-data:x:33:\nuser1000:x:1000:\ngroup50000:x:50000:user1000\nnogroup:x:65534:\n"
)
_PGREP = "#!/bin/sh\nps -o pid,comm | awk -v p=\"$1\" 'NR > 1 && $2 ~ p {print $1}'\n"
# critest's web server images: busybox httpd serving an index page on port $1, its pid file,
# and a process named nginx (a script's name is its process name) for pidof and /proc/1. It
# stops at SIGTERM as nginx does (CRI-O stops a pod's containers with SIGTERM and waits out the
# caller's deadline, minutes, for one that ignores it).
_NGINX = (
    "#!/bin/sh\nmkdir -p /www /var/run\necho ok > /www/index.html\necho $$ > /var/run/nginx.pid\n"
    "trap 'kill $h 2>/dev/null; exit 0' TERM INT QUIT\n"
    'echo "httpd listening on :$1"\nhttpd -f -p "$1" -h /www & h=$!\nwait $h\n'
)
# A fixed timestamp keeps the layer (and so every digest) reproducible.
_EPOCH = 0

_OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
_OCI_CONFIG = "application/vnd.oci.image.config.v1+json"
_OCI_LAYER_GZIP = "application/vnd.oci.image.layer.v1.tar+gzip"


@dataclass(frozen=True)
class ImageSpec:
    """What goes into one image: its name and how its container starts."""

    name: str
    entrypoint: tuple[str, ...] = ()
    cmd: tuple[str, ...] = ("sh",)
    user: str = ""  # the image's USER ("1002", "www-data", "1003:1003"); empty: root
    labels: tuple[tuple[str, str], ...] = ()  # also what tells otherwise equal images apart


BUSYBOX = ImageSpec(BUSYBOX_IMAGE, entrypoint=(), cmd=("sh",))
# The pod sandbox ("pause") container stays alive until told to stop, and stops at SIGTERM as
# upstream's pause does: containerd stops a sandbox with SIGKILL, but CRI-O sends SIGTERM and
# waits out the caller's deadline (minutes) for a PID 1 that ignores it, as busybox sleep does.
# The shell waits on its sleep, so the trap runs at once; the sleep goes with it (with the host's
# PID namespace the shell is not PID 1, and nothing else would end it).
PAUSE = ImageSpec(
    PAUSE_IMAGE,
    entrypoint=(
        "/bin/sh",
        "-c",
        "trap 'kill $s 2>/dev/null; exit 0' TERM INT; "
        "while :; do sleep 2147483647 & s=$!; wait $s; done",
    ),
    cmd=(),
)


def find_busybox() -> str | None:
    """Path of a statically linked busybox, or None."""
    for candidate in ("/bin/busybox", shutil.which("busybox")):
        if candidate and os.path.isfile(candidate) and _is_static(candidate):
            return candidate
    return None


def _is_static(path: str) -> bool:
    # A dynamically linked ELF has a PT_INTERP program header; look for the loader path in the
    # first bytes instead of parsing ELF: the interpreter string sits near the start of the file.
    with open(path, "rb") as f:
        head = f.read(4096)
    return head.startswith(b"\x7fELF") and b"/ld-linux" not in head and b"/ld-musl" not in head


def oci_arch(machine: str | None = None) -> str:
    """The OCI architecture name of this machine (x86_64 -> amd64, aarch64 -> arm64, ...)."""
    machine = (machine or platform.machine()).lower()
    return {
        "x86_64": "amd64",
        "amd64": "amd64",
        "aarch64": "arm64",
        "arm64": "arm64",
        "armv7l": "arm",
        "ppc64le": "ppc64le",
        "s390x": "s390x",
        "riscv64": "riscv64",
    }.get(machine, machine)


def _applets(busybox: str) -> list[str]:
    try:
        out = subprocess.run(
            [busybox, "--list"], capture_output=True, text=True, check=True, timeout=10
        ).stdout
        names = sorted({n.strip() for n in out.split() if n.strip() and "/" not in n})
    except (OSError, subprocess.SubprocessError):
        names = []
    names = [n for n in names if n != "busybox"]
    return names or sorted(_FALLBACK_APPLETS)


def _tarinfo(name: str, kind: bytes, mode: int) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type = kind
    info.mode = mode
    info.mtime = _EPOCH
    info.uid = info.gid = 0
    info.uname = info.gname = "root"
    return info


def _layer_tar(busybox: str) -> bytes:
    """Uncompressed layer: the root file system of both images."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for d, mode in (
            ("bin", 0o755),
            ("dev", 0o755),
            ("etc", 0o755),
            ("proc", 0o555),
            ("root", 0o700),
            ("sys", 0o555),
            ("tmp", 0o1777),
            ("usr", 0o755),
            ("usr/bin", 0o755),
            ("usr/sbin", 0o755),
            ("var", 0o755),
        ):
            tar.addfile(_tarinfo(d, tarfile.DIRTYPE, mode))
        data = Path(busybox).read_bytes()
        info = _tarinfo("bin/busybox", tarfile.REGTYPE, 0o755)
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
        # Hard links, as the upstream busybox image has them: masking one applet's path
        # (a CRI MaskedPaths entry) then leaves the others, and sh, alone.
        for applet in _applets(busybox):
            link = _tarinfo(f"bin/{applet}", tarfile.LNKTYPE, 0o755)
            link.linkname = "bin/busybox"
            tar.addfile(link)
        # Stand-ins for tools Debian's busybox-static has no applet for (critest's specs call
        # them): pgrep by process name, ipcs -m as the kernel lists the segments, and nginx.
        for name, text in (
            ("usr/bin/pgrep", _PGREP),
            ("usr/bin/ipcs", "#!/bin/sh\ncat /proc/sysvipc/shm\n"),
            ("usr/sbin/nginx", _NGINX),
        ):
            raw = text.encode()
            info = _tarinfo(name, tarfile.REGTYPE, 0o755)
            info.size = len(raw)
            tar.addfile(info, io.BytesIO(raw))
        # Minimal user database: runtimes look up the image user here (root; www-data and
        # user1000 with a supplementary group for critest's user images).
        for name, text in (
            ("etc/passwd", _PASSWD),
            ("etc/group", _GROUP),
        ):
            raw = text.encode()
            info = _tarinfo(name, tarfile.REGTYPE, 0o644)
            info.size = len(raw)
            tar.addfile(info, io.BytesIO(raw))
    return buf.getvalue()


def _gzip(data: bytes) -> bytes:
    # mtime=0 and no file name: gzip output depends only on the input bytes.
    buf = io.BytesIO()
    with gzip.GzipFile(fileobj=buf, mode="wb", mtime=0, compresslevel=6) as gz:
        gz.write(data)
    return buf.getvalue()


def _digest(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def _json(obj: object) -> bytes:
    return json.dumps(obj, sort_keys=True, separators=(",", ":")).encode()


def build_oci_archive(
    out: str | os.PathLike[str],
    spec: ImageSpec,
    busybox: str | None = None,
    arch: str | None = None,
) -> Path:
    """Write an OCI image archive (a tar of an OCI image layout) for ``spec`` to ``out``."""
    busybox = busybox or find_busybox()
    if not busybox:
        raise FileNotFoundError(
            "no static busybox found (/bin/busybox or on PATH); "
            "install it with: apt-get install busybox-static"
        )
    arch = arch or oci_arch()
    layer_tar = _layer_tar(busybox)
    layer = _gzip(layer_tar)
    config = _json(
        {
            "architecture": arch,
            "os": "linux",
            "created": "1970-01-01T00:00:00Z",
            "config": {
                "Env": [_PATH_ENV],
                "Entrypoint": list(spec.entrypoint) or None,
                "Cmd": list(spec.cmd) or None,
                "WorkingDir": "/",
                **({"User": spec.user} if spec.user else {}),
                **({"Labels": dict(spec.labels)} if spec.labels else {}),
            },
            "rootfs": {"type": "layers", "diff_ids": [_digest(layer_tar)]},
            "history": [{"created": "1970-01-01T00:00:00Z", "created_by": "enforcer.devenv"}],
        }
    )
    manifest = _json(
        {
            "schemaVersion": 2,
            "mediaType": _OCI_MANIFEST,
            "config": {"mediaType": _OCI_CONFIG, "digest": _digest(config), "size": len(config)},
            "layers": [
                {"mediaType": _OCI_LAYER_GZIP, "digest": _digest(layer), "size": len(layer)}
            ],
        }
    )
    tag = spec.name.rsplit(":", 1)[1] if ":" in spec.name.rsplit("/", 1)[-1] else "latest"
    index = _json(
        {
            "schemaVersion": 2,
            "mediaType": "application/vnd.oci.image.index.v1+json",
            "manifests": [
                {
                    "mediaType": _OCI_MANIFEST,
                    "digest": _digest(manifest),
                    "size": len(manifest),
                    "platform": {"architecture": arch, "os": "linux"},
                    "annotations": {
                        "io.containerd.image.name": spec.name,
                        "org.opencontainers.image.ref.name": tag,
                    },
                }
            ],
        }
    )
    files: list[tuple[str, bytes]] = [
        ("oci-layout", _json({"imageLayoutVersion": "1.0.0"})),
        ("index.json", index),
    ]
    for blob in (layer, config, manifest):
        files.append((f"blobs/sha256/{_digest(blob).split(':', 1)[1]}", blob))

    out_path = Path(out)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(out_path, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for d in ("blobs", "blobs/sha256"):
            tar.addfile(_tarinfo(d, tarfile.DIRTYPE, 0o755))
        for name, data in files:
            info = _tarinfo(name, tarfile.REGTYPE, 0o644)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return out_path


def import_image(
    ctr_socket: str,
    archive: str | os.PathLike[str],
    namespace: str = "k8s.io",
    snapshotter: str | None = None,
    ctr: str = "ctr",
    timeout: float = 120,
) -> None:
    """Load an image archive into containerd: ``ctr -a SOCKET -n k8s.io images import FILE``.

    ``k8s.io`` is the namespace containerd's CRI plugin serves. ``snapshotter`` must be the one
    the CRI plugin uses, or the image is unpacked where CRI does not look.
    """
    cmd = [ctr, "-a", ctr_socket, "-n", namespace, "images", "import"]
    if snapshotter:
        cmd += ["--snapshotter", snapshotter]
    cmd.append(os.fspath(archive))
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    if proc.returncode != 0:
        raise RuntimeError(
            f"{' '.join(cmd)} failed with exit code {proc.returncode}:\n{proc.stdout}{proc.stderr}"
        )


def build_default_images(folder: str | os.PathLike[str]) -> dict[str, Path]:
    """Build the busybox and pause archives in ``folder``; returns image name -> archive."""
    folder = Path(folder)
    return {
        BUSYBOX_IMAGE: build_oci_archive(folder / "busybox.oci.tar", BUSYBOX),
        PAUSE_IMAGE: build_oci_archive(folder / "pause.oci.tar", PAUSE),
    }
