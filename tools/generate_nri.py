"""Regenerate the NRI and ttrpc Python modules from ``proto/nri`` and ``proto/ttrpc``.

Usage: ``python -m tools.generate_nri [--out DIR]`` (``make proto`` runs it).

The modules are committed; ``tests/test_nri_proto.py`` regenerates them into a temporary
folder and requires byte-identical output (the same pinned ``grpcio-tools`` as the CRI ones).
Messages only (no gRPC stubs): ttrpc is not gRPC, and ``enforcer.nri`` speaks it by hand.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

from tools.protogen import PROTO_ROOT, REPO_ROOT, protoc, run_cli, write_generated

PACKAGE_DIR = REPO_ROOT / "enforcer" / "nriapi"  # where the modules are committed
# Relative to PROTO_ROOT: registered as "nri/api.proto" and "ttrpc/request.proto".
PROTO_FILES = {"nri/api.proto": "api", "ttrpc/request.proto": "request"}
GENERATED = tuple(
    f"{stem}{suffix}" for stem in PROTO_FILES.values() for suffix in ("_pb2.py", "_pb2.pyi")
)


def generate(out_dir: Path) -> list[Path]:
    """Generate the modules into ``out_dir``; returns the files written."""
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    with tempfile.TemporaryDirectory(prefix="nri-gen-") as tmp:
        tmp_path = Path(tmp)
        for proto in PROTO_FILES:
            protoc([f"--python_out={tmp_path}", f"--pyi_out={tmp_path}", str(PROTO_ROOT / proto)])
        for proto, stem in PROTO_FILES.items():
            folder = tmp_path / Path(proto).parent
            for suffix in ("_pb2.py", "_pb2.pyi"):
                text = (folder / f"{stem}{suffix}").read_text()
                written.append(write_generated(out_dir / f"{stem}{suffix}", text))
    return written


def main(argv: list[str] | None = None) -> int:
    return run_cli(generate, __doc__ or "", PACKAGE_DIR, argv)


if __name__ == "__main__":
    sys.exit(main())
