"""Regenerate the NRI and ttrpc Python modules from ``proto/nri`` and ``proto/ttrpc``.

Usage: ``python -m enforcer.nriapi.generate [--out DIR]`` (``make proto`` runs it).

The modules are committed; ``tests/test_nri_proto.py`` regenerates them into a temporary
folder and requires byte-identical output (the same pinned ``grpcio-tools`` as the CRI ones).
Messages only (no gRPC stubs): ttrpc is not gRPC, and ``enforcer.nri`` speaks it by hand.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parent
REPO_ROOT = PACKAGE_DIR.parent.parent
PROTO_ROOT = REPO_ROOT / "proto"
# Relative to PROTO_ROOT: registered as "nri/api.proto" and "ttrpc/request.proto".
PROTO_FILES = {"nri/api.proto": "api", "ttrpc/request.proto": "request"}
GENERATED = tuple(
    f"{stem}{suffix}" for stem in PROTO_FILES.values() for suffix in ("_pb2.py", "_pb2.pyi")
)


def _protoc(args: list[str]) -> int:
    # Imported here: grpc_tools is a test/dev dependency, not needed at run time.
    import importlib.resources

    from grpc_tools import protoc

    include = str(importlib.resources.files("grpc_tools") / "_proto")
    return protoc.main(["grpc_tools.protoc", f"-I{include}", *args])


def generate(out_dir: Path) -> list[Path]:
    """Generate the modules into ``out_dir``; returns the files written."""
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    with tempfile.TemporaryDirectory(prefix="nri-gen-") as tmp:
        tmp_path = Path(tmp)
        for proto in PROTO_FILES:
            rc = _protoc(
                [
                    f"-I{PROTO_ROOT}",
                    f"--python_out={tmp_path}",
                    f"--pyi_out={tmp_path}",
                    str(PROTO_ROOT / proto),
                ]
            )
            if rc != 0:
                raise RuntimeError(f"protoc failed with exit code {rc} on {PROTO_ROOT / proto}")
        for proto, stem in PROTO_FILES.items():
            folder = tmp_path / Path(proto).parent
            for suffix in ("_pb2.py", "_pb2.pyi"):
                text = (folder / f"{stem}{suffix}").read_text()
                if suffix.endswith(".pyi"):
                    text = "# ruff: noqa\n" + text  # generated stubs: kept out of the lint run
                target = out_dir / f"{stem}{suffix}"
                with open(target, "w", newline="\n") as f:  # identical bytes on every platform
                    f.write(text)
                written.append(target)
    return written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--out",
        type=Path,
        default=PACKAGE_DIR,
        help="folder to write the modules into (default: the enforcer/nriapi package)",
    )
    args = parser.parse_args(argv)
    for path in generate(args.out):
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
