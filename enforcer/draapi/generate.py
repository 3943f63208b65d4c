"""Regenerate the DRA and plugin-registration Python modules from ``proto/dra/dra.proto`` and
``proto/pluginregistration/registration.proto``.

Usage: ``python -m enforcer.draapi.generate [--out DIR]`` (``make proto`` runs it).

The generated modules are committed; ``tests/test_dra_proto.py`` regenerates them into a
temporary folder and requires byte-identical output.
"""

from __future__ import annotations

import re
import sys
import tempfile
from pathlib import Path

from enforcer.protogen import PROTO_ROOT, protoc, run_cli, write_generated

PACKAGE_DIR = Path(__file__).resolve().parent
# Relative to PROTO_ROOT, so the descriptors are registered as "dra/dra.proto" and
# "pluginregistration/registration.proto" (no clash with another "api.proto").
PROTO_FILES = {"dra/dra.proto": "dra", "pluginregistration/registration.proto": "registration"}
GENERATED = tuple(
    f"{stem}{suffix}"
    for stem in PROTO_FILES.values()
    for suffix in ("_pb2.py", "_pb2.pyi", "_pb2_grpc.py")
)

# protoc writes `from dra import dra_pb2 as ...`, an absolute import of a package that does not
# exist; inside enforcer.draapi the module is a sibling.
_IMPORT_RE = re.compile(r"^from (?:dra|pluginregistration) import (\w+_pb2) as (\w+)$", re.M)


def generate(out_dir: Path) -> list[Path]:
    """Generate the modules into ``out_dir``; returns the files written."""
    out_dir.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    with tempfile.TemporaryDirectory(prefix="dra-gen-") as tmp:
        tmp_path = Path(tmp)
        for proto, stem in PROTO_FILES.items():
            protoc(
                [
                    f"--python_out={tmp_path}",
                    f"--pyi_out={tmp_path}",
                    f"--grpc_python_out={tmp_path}",
                    str(PROTO_ROOT / proto),
                ]
            )
            folder = tmp_path / proto.split("/", 1)[0]
            for suffix in ("_pb2.py", "_pb2.pyi", "_pb2_grpc.py"):
                name = f"{stem}{suffix}"
                text = _IMPORT_RE.sub(r"from . import \1 as \2", (folder / name).read_text())
                written.append(write_generated(out_dir / name, text))
    return written


def main(argv: list[str] | None = None) -> int:
    return run_cli(generate, __doc__ or "", PACKAGE_DIR, argv)


if __name__ == "__main__":
    sys.exit(main())
