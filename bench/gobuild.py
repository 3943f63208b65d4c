"""Builds the Go baselines in bench/baselines/ with the machine's Go toolchain, offline.

Debian's packages give the toolchain (golang-go) and the libraries (golang-google-grpc-dev and
what it pulls in) as sources under /usr/share/gocode; the baselines are built in GOPATH mode
against them, with no module proxy (`bench/README.md`: "Go baselines"). When Go or the gRPC
sources are missing, `build` says so and returns None: the benchmarks still run the Python
figures.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

BASELINES = Path(__file__).resolve().parent / "baselines"
OUT = Path(__file__).resolve().parent / "results" / "go"
GOCODE = Path("/usr/share/gocode")
PROGRAMS = ("webhook", "criclient", "grpcproxy", "bytepipe")
INSTALL_HINT = "apt-get install golang-go golang-google-grpc-dev  (make bench-deps)"


def missing() -> str | None:
    """Why the baselines cannot be built here, or None."""
    if shutil.which("go") is None:
        return f"Go is not installed: {INSTALL_HINT}"
    if not (GOCODE / "src/google.golang.org/grpc").is_dir():
        return f"grpc-go's sources are not in {GOCODE}: {INSTALL_HINT}"
    return None


def build(names: tuple[str, ...] = PROGRAMS) -> dict[str, Path] | None:
    """The built programs by name (rebuilt when a source is newer), or None, having printed
    why, when Go is missing."""
    reason = missing()
    if reason is not None:
        print(f"Go baselines skipped: {reason}", flush=True)
        return None
    OUT.mkdir(parents=True, exist_ok=True)
    built: dict[str, Path] = {}
    newest = max(p.stat().st_mtime for p in BASELINES.rglob("*.go"))
    with tempfile.TemporaryDirectory(prefix="kre-gopath-") as tmp:
        (Path(tmp) / "src").mkdir()
        (Path(tmp) / "src" / "kre-bench").symlink_to(BASELINES)
        env = {
            **os.environ,
            "GO111MODULE": "off",
            "GOPATH": f"{tmp}:{GOCODE}",
            "GOFLAGS": "",
            "GOPROXY": "off",
            "CGO_ENABLED": "0",
        }
        for name in names:
            binary = OUT / name
            if not binary.exists() or binary.stat().st_mtime < newest:
                subprocess.run(
                    ["go", "build", "-o", str(binary), f"kre-bench/{name}"],
                    check=True,
                    env=env,
                    cwd=tmp,
                )
            built[name] = binary
    return built
