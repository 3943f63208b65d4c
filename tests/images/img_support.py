"""Building and running the images with podman, for tests/images (see its conftest.py)."""

from __future__ import annotations

import contextlib
import resource
import shutil
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
REPO = "localhost/kube-resource-enforcer"
CA_BUNDLE = Path("/etc/ssl/certs/ca-certificates.crt")
BUILD_TIMEOUT = 900

# Printed at the end of the run: step -> seconds, image -> bytes.
timings: dict[str, float] = {}
sizes: dict[str, int] = {}


@dataclass(frozen=True)
class Image:
    name: str  # webhook | enforcer
    ref: str  # what `podman run` takes
    program: str  # the console script, the image's ENTRYPOINT


def podman_exe() -> str:
    exe = shutil.which("podman")
    if exe is None:
        pytest.fail(
            "podman is needed to build and run the images (.ci/system-deps.sh installs it)",
            pytrace=False,
        )
    return exe


def run_limits() -> list[str]:
    """`--ulimit` flags for `podman run`: this process's own hard limits.

    Run as root, podman asks the OCI runtime for 1048576 open files and processes, which only
    works where the caller may raise its hard limits (CAP_SYS_RESOURCE). Sandboxes that withhold
    that capability (such as the one these tests were written in) refuse the container with
    "error setting rlimits ... operation not permitted". Our own limits are always allowed; the
    process count is capped by the kernel's pid_max anyway.
    """
    nofile = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    nproc = resource.getrlimit(resource.RLIMIT_NPROC)[1]
    pid_max = int(Path("/proc/sys/kernel/pid_max").read_text())
    if nofile == resource.RLIM_INFINITY:
        nofile = int(Path("/proc/sys/fs/nr_open").read_text())
    if nproc == resource.RLIM_INFINITY or nproc > pid_max:
        nproc = pid_max
    return ["--ulimit", f"nofile={nofile}:{nofile}", "--ulimit", f"nproc={nproc}:{nproc}"]


def podman(*args: str, timeout: float = 120, check: bool = True) -> subprocess.CompletedProcess:
    out = subprocess.run(
        [podman_exe(), *args], capture_output=True, text=True, timeout=timeout, check=False
    )
    if check and out.returncode != 0:
        pytest.fail(
            f"podman {' '.join(args)} exited {out.returncode}:\n{out.stderr[-4000:]}",
            pytrace=False,
        )
    return out


def run_in(image: Image, *args: str, options: tuple[str, ...] = ()) -> subprocess.CompletedProcess:
    """`podman run --rm IMAGE ARGS` (the ENTRYPOINT is the program), not checked."""
    return podman("run", "--rm", *run_limits(), *options, image.ref, *args, check=False)


def python_in(image: Image, code: str) -> subprocess.CompletedProcess:
    """The image's own interpreter (the virtual environment's) running `code`."""
    return podman(
        "run", "--rm", *run_limits(), "--entrypoint", "python", image.ref, "-c", code, check=False
    )


@contextlib.contextmanager
def container(image: Image, *args: str, options: tuple[str, ...] = ()) -> Iterator[str]:
    """A detached container, removed on the way out; yields its name."""
    name = f"kre-test-{image.name}-{time.monotonic_ns()}"
    podman("run", "-d", "--name", name, *run_limits(), *options, image.ref, *args)
    try:
        yield name
    finally:
        podman("rm", "-f", "-t", "0", name, check=False)


def image_id(ref: str) -> str | None:
    out = podman("image", "inspect", "--format", "{{.Id}}", ref, check=False)
    return out.stdout.strip() if out.returncode == 0 else None


def build(name: str, base: str) -> Image:
    ref = f"{REPO}/{name}:test"
    previous = image_id(ref)
    args = [
        "build",
        "--format=docker",  # keeps HEALTHCHECK, which the OCI format drops
        "--network=host",
        f"--build-arg=BASE_IMAGE={base}",
        f"--file={ROOT / f'Dockerfile.{name}'}",
        f"--tag={ref}",
    ]
    if CA_BUNDLE.is_file():
        # pip in the build trusts what this machine trusts (a TLS-inspecting proxy's CA, where
        # there is one). A bind mount of RUN steps only: nothing of it is in the image.
        args.append(f"--volume={CA_BUNDLE}:{CA_BUNDLE}:ro")
    started = time.monotonic()
    podman(*args, str(ROOT), timeout=BUILD_TIMEOUT)
    timings[f"{name} image"] = time.monotonic() - started
    if previous and previous != image_id(ref):
        podman("rmi", previous, check=False)  # the image this build replaced, if unused
    sizes[name] = int(podman("image", "inspect", "--format", "{{.Size}}", ref).stdout)
    return Image(name, ref, f"resource-{name}")
