"""Regenerate kubelet's pod-resources (v1) Python modules from ``proto/podresources/api.proto``
into ``enforcer/podresourcesapi/``, and the device-plugin (v1beta1) ones the tests' device
plugin speaks from ``proto/deviceplugin/api.proto`` into ``tests/support/devicepluginapi/``
(never in the wheel).

Usage: ``python -m tools.generate_podresources [--out DIR]`` (``make proto`` runs it; with
``--out`` both sets go into DIR).

The generated modules are committed; ``tests/unit/test_podresources_proto.py`` regenerates them
into a temporary folder and requires byte-identical output.
"""

from __future__ import annotations

import re
import sys
import tempfile
from pathlib import Path

from tools.protogen import PROTO_ROOT, REPO_ROOT, protoc, run_cli, write_generated

PACKAGE_DIR = REPO_ROOT / "enforcer" / "podresourcesapi"
TESTS_DIR = REPO_ROOT / "tests" / "support" / "devicepluginapi"
# Relative to PROTO_ROOT, so the descriptors are registered as "podresources/api.proto" and
# "deviceplugin/api.proto" (no clash with the CRI's "api.proto"). proto -> (stem, shipped).
PROTO_FILES = {
    "podresources/api.proto": ("podresources", True),
    "deviceplugin/api.proto": ("deviceplugin", False),
}
SUFFIXES = ("_pb2.py", "_pb2.pyi", "_pb2_grpc.py")
GENERATED = {
    stem: tuple(f"{stem}{suffix}" for suffix in SUFFIXES) for stem, _ in PROTO_FILES.values()
}

# protoc writes `from podresources import api_pb2 as ...`: inside the package it is a sibling.
_IMPORT_RE = re.compile(r"^from (?:podresources|deviceplugin) import api_pb2 as (\w+)$", re.M)


def target_dir(stem: str, out: Path | None) -> Path:
    """Where `stem`'s modules are committed, or `out` when given."""
    if out is not None:
        return out
    return PACKAGE_DIR if stem == "podresources" else TESTS_DIR


def generate(out_dir: Path | None) -> list[Path]:
    """Generate the modules (into ``out_dir`` when given); returns the files written."""
    written: list[Path] = []
    with tempfile.TemporaryDirectory(prefix="podresources-gen-") as tmp:
        tmp_path = Path(tmp)
        for proto, (stem, _) in PROTO_FILES.items():
            protoc(
                [
                    f"--python_out={tmp_path}",
                    f"--pyi_out={tmp_path}",
                    f"--grpc_python_out={tmp_path}",
                    str(PROTO_ROOT / proto),
                ]
            )
            folder = tmp_path / proto.split("/", 1)[0]
            target = target_dir(stem, out_dir)
            target.mkdir(parents=True, exist_ok=True)
            for suffix in SUFFIXES:
                text = (folder / f"api{suffix}").read_text()
                text = _IMPORT_RE.sub(rf"from . import {stem}_pb2 as \1", text)
                written.append(write_generated(target / f"{stem}{suffix}", text))
    return written


def _generate_default(out: Path) -> list[Path]:
    return generate(None if out == PACKAGE_DIR else out)


def main(argv: list[str] | None = None) -> int:
    return run_cli(_generate_default, __doc__ or "", PACKAGE_DIR, argv)


if __name__ == "__main__":
    sys.exit(main())
