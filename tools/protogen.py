"""What both generators of committed protobuf modules share (`tools.generate_cri`,
`tools.generate_nri`): running protoc, writing its output byte for byte the same on every
platform, and the command line."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
PROTO_ROOT = REPO_ROOT / "proto"


def protoc(args: list[str]) -> None:
    """Runs grpcio-tools' protoc with its own well-known types on the include path and the
    project's proto/ folder; RuntimeError when it fails."""
    # Imported here: grpc_tools is a test/dev dependency, not needed at run time.
    import importlib.resources

    from grpc_tools import protoc as tool

    include = str(importlib.resources.files("grpc_tools") / "_proto")
    rc = tool.main(["grpc_tools.protoc", f"-I{include}", f"-I{PROTO_ROOT}", *args])
    if rc != 0:
        raise RuntimeError(f"protoc failed with exit code {rc} on {args[-1]}")


def write_generated(target: Path, text: str) -> Path:
    """Writes one generated module; stubs (.pyi) are marked to be kept out of the lint run
    (they use an older typing style)."""
    if target.suffix == ".pyi":
        text = "# ruff: noqa\n" + text
    with open(target, "w", newline="\n") as f:  # identical bytes on every platform
        f.write(text)
    return target


def run_cli(
    generate: Callable[[Path], list[Path]], doc: str, package_dir: Path, argv: list[str] | None
) -> int:
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument(
        "--out",
        type=Path,
        default=package_dir,
        help=f"folder to write the modules into (default: {package_dir.name}'s package)",
    )
    args = parser.parse_args(argv)
    for path in generate(args.out):
        print(f"wrote {path}")
    return 0
