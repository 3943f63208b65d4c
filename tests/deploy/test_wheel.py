"""What `pip install .` ships: the two programs and their contract package, no test tooling."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def wheel_files(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    out = tmp_path_factory.mktemp("wheel")
    # No build isolation: the venv's setuptools builds it, as fast as an editable install.
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-q",
            "-w",
            str(out),
            str(ROOT),
        ],
        check=True,
        cwd=out,
    )
    (wheel,) = out.glob("kube_resource_enforcer-*.whl")
    with zipfile.ZipFile(wheel) as zf:
        return zf.namelist()


def _packages(files: list[str]) -> set[str]:
    return {f.split("/")[0] for f in files if f.endswith(".py")}


def test_the_wheel_holds_the_programs_and_their_contract(wheel_files: list[str]) -> None:
    assert _packages(wheel_files) == {"enforcer", "webhook", "resource_contract", "resource_files"}
    for module in (
        "enforcer/cli.py",
        "enforcer/cri/api_pb2.py",
        "webhook/cli.py",
        "resource_contract/config.py",
        "resource_contract/pod_annotation.py",
        "resource_files/safe_files.py",
    ):
        assert module in wheel_files


def test_the_wheel_holds_no_protobuf_generator(wheel_files: list[str]) -> None:
    """The generators need grpc_tools and the repository's proto/: they live in tools/."""
    generators = [
        f for f in wheel_files if f.startswith("tools/") or "generate" in f or "protogen" in f
    ]
    assert generators == []


def test_the_wheel_holds_no_test_or_demo_tooling(wheel_files: list[str]) -> None:
    tooling = [
        f
        for f in wheel_files
        if f.startswith("tests/")
        or any(
            part in f
            for part in (
                "devenv",
                "emulator",
                "demo",
                "fake_apiserver",
                "fake_resctrl",
                "containerd.py",
            )
        )
    ]
    assert tooling == []
