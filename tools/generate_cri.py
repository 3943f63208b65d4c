"""Regenerate the CRI Python modules from ``proto/cri/api.proto``.

Usage: ``python -m tools.generate_cri [--out DIR]`` (``make proto`` runs it).

The generated modules are committed; ``tests/test_proto.py`` regenerates them into a temporary
folder and requires byte-identical output, so the output must be deterministic: the same
``grpcio-tools`` version, the same include path and the same post-processing every time.
"""

from __future__ import annotations

import re
import sys
import tempfile
from pathlib import Path

from tools.protogen import PROTO_ROOT, REPO_ROOT, protoc, run_cli, write_generated

PACKAGE_DIR = REPO_ROOT / "enforcer" / "cri"  # where the modules are committed
# Relative to PROTO_ROOT: the descriptor is registered as "cri/api.proto", a name less likely to
# clash in the process-wide descriptor pool than a bare "api.proto".
PROTO_FILE = "cri/api.proto"
GENERATED = ("api_pb2.py", "api_pb2.pyi", "api_pb2_grpc.py")

# protoc writes `from cri import api_pb2 as ...`, an absolute import of a package that does not
# exist; inside enforcer.cri the module is a sibling.
_IMPORT_RE = re.compile(r"^from cri import api_pb2 as (\w+)$", re.MULTILINE)


def generate(out_dir: Path) -> list[Path]:
    """Generate the modules into ``out_dir``; returns the files written."""
    out_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="cri-gen-") as tmp:
        tmp_path = Path(tmp)
        protoc(
            [
                f"--python_out={tmp_path}",
                f"--pyi_out={tmp_path}",
                f"--grpc_python_out={tmp_path}",
                str(PROTO_ROOT / PROTO_FILE),
            ]
        )
        return [
            write_generated(
                out_dir / name,
                _IMPORT_RE.sub(
                    r"from . import api_pb2 as \1", (tmp_path / "cri" / name).read_text()
                ),
            )
            for name in GENERATED
        ]


def main(argv: list[str] | None = None) -> int:
    return run_cli(generate, __doc__ or "", PACKAGE_DIR, argv)


if __name__ == "__main__":
    sys.exit(main())
