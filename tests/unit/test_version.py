"""`--version` of both programs: `NAME VERSION` on stdout, exit 0, no command needed."""

from __future__ import annotations

import tomllib
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest

from enforcer.cli import main as enforcer_main
from webhook.cli import main as webhook_main

ROOT = Path(__file__).resolve().parents[2]
# The version a release carries is the one in pyproject.toml; the programs read it from the
# installed distribution's metadata.
VERSION = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]


@pytest.mark.parametrize(
    ("name", "main"),
    [("resource-webhook", webhook_main), ("resource-enforcer", enforcer_main)],
    ids=["webhook", "enforcer"],
)
def test_version(
    name: str, main: Callable[[Sequence[str] | None], int], capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["--version"])
    assert exit_.value.code == 0
    out = capsys.readouterr()
    assert out.out == f"{name} {VERSION}\n"
    assert out.err == ""
