"""Regenerate the CRI Python modules from ``proto/cri/api.proto``.

Usage: ``python -m enforcer.cri.generate [--out DIR]`` (``make proto`` runs it).

The generated modules are committed; ``tests/test_proto.py`` regenerates them into a temporary
folder and requires byte-identical output, so the output must be deterministic: the same
``grpcio-tools`` version, the same include path and the same post-processing every time.
"""

from __future__ import annotations

import argparse
import re
import sys
import tempfile
from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parent
REPO_ROOT = PACKAGE_DIR.parent.parent
PROTO_ROOT = REPO_ROOT / "proto"
# Relative to PROTO_ROOT: the descriptor is registered as "cri/api.proto", a name less likely to
# clash in the process-wide descriptor pool than a bare "api.proto".
PROTO_FILE = "cri/api.proto"
GENERATED = ("api_pb2.py", "api_pb2.pyi", "api_pb2_grpc.py")

# protoc writes `from cri import api_pb2 as ...`, an absolute import of a package that does not
# exist; inside enforcer.cri the module is a sibling.
_IMPORT_RE = re.compile(r"^from cri import api_pb2 as (\w+)$", re.MULTILINE)


def _protoc(args: list[str]) -> int:
    # Imported here: grpc_tools is a test/dev dependency, not needed at run time.
    import importlib.resources

    from grpc_tools import protoc

    include = str(importlib.resources.files("grpc_tools") / "_proto")
    return protoc.main(["grpc_tools.protoc", f"-I{include}", *args])


def generate(out_dir: Path) -> list[Path]:
    """Generate the modules into ``out_dir``; returns the files written."""
    out_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="cri-gen-") as tmp:
        tmp_path = Path(tmp)
        rc = _protoc(
            [
                f"-I{PROTO_ROOT}",
                f"--python_out={tmp_path}",
                f"--pyi_out={tmp_path}",
                f"--grpc_python_out={tmp_path}",
                str(PROTO_ROOT / PROTO_FILE),
            ]
        )
        if rc != 0:
            raise RuntimeError(f"protoc failed with exit code {rc} on {PROTO_ROOT / PROTO_FILE}")
        written = []
        for name in GENERATED:
            text = (tmp_path / "cri" / name).read_text()
            text = _IMPORT_RE.sub(r"from . import api_pb2 as \1", text)
            if name.endswith(".pyi"):
                # Generated stubs use the older typing style; keep them out of the lint run
                # (pyproject excludes only the *_pb2*.py modules).
                text = "# ruff: noqa\n" + text
            target = out_dir / name
            # newline="\n": identical bytes whatever the platform.
            with open(target, "w", newline="\n") as f:
                f.write(text)
            written.append(target)
    return written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--out",
        type=Path,
        default=PACKAGE_DIR,
        help="folder to write the modules into (default: the enforcer/cri package)",
    )
    args = parser.parse_args(argv)
    for path in generate(args.out):
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
