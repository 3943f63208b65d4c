"""What `resource-enforcer status` makes of damaged state files: the sound entries shown,
the damaged ones named, one line when it cannot use the state, and the file never moved."""

from __future__ import annotations

import errno
from collections.abc import Callable
from pathlib import Path

import pytest

from enforcer.commands.status import status
from enforcer.state import store as store_module
from tests.engine.restore_support import Runtime, admitted, edit, raw, setitem


def test_status_shows_the_sound_entries_and_names_the_damaged_ones(
    saved: tuple[Path, Runtime], capsys: pytest.CaptureFixture[str]
) -> None:
    folder, _ = saved
    path = folder / "state.json"
    edit(lambda s: setitem(admitted(s, 1)["request"], "cpu_request_milli", "two"))(path)
    assert status(str(folder)) == 0
    out = capsys.readouterr()
    assert f"warning: state file {path}: policy entry 2 (e2e/second/app)" in out.err
    assert "not shown: 2 of 6 entries" in out.err
    assert " first " in out.out and " second " not in out.out
    assert path.exists() and not list(folder.glob("state.json.corrupt-*"))  # never moved


def test_status_names_a_policy_name_that_is_not_a_string(
    saved: tuple[Path, Runtime], capsys: pytest.CaptureFixture[str]
) -> None:
    folder, _ = saved
    path = folder / "state.json"
    edit(lambda s: setitem(s["policy"], "policy", {"name": "static"}))(path)
    assert status(str(folder)) == 0  # once a TypeError
    out = capsys.readouterr()
    assert "it names the policy {'name': 'static'}, which is unknown" in out.err
    assert " first " in out.out and " third " in out.out


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        (edit(lambda s: s.pop("topology")), "its topology or policy configuration is damaged"),
        (
            edit(lambda s: setitem(s, "policyConfig", {"name": "greedy"})),
            "its topology or policy configuration is damaged",
        ),
        (raw(b"[1, 2"), "it is not JSON"),
    ],
)
def test_status_on_a_state_it_cannot_use_is_one_line(
    saved: tuple[Path, Runtime],
    capsys: pytest.CaptureFixture[str],
    damage: Callable[[Path], None],
    message: str,
) -> None:
    folder, _ = saved
    damage(folder / "state.json")
    assert status(str(folder)) == 1
    *warnings, last = capsys.readouterr().err.strip().splitlines()
    assert last.startswith("cannot use the state: ") and message in last
    assert all(w.startswith("warning: ") for w in warnings)


def test_status_when_the_state_file_cannot_be_read_is_one_line(
    saved: tuple[Path, Runtime],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    folder, _ = saved

    def denied(path: Path) -> bytes:  # root reads anything: the refusal is played
        raise PermissionError(errno.EACCES, "Permission denied", str(path))

    monkeypatch.setattr(store_module, "read_file", denied)
    assert status(str(folder)) == 1
    assert capsys.readouterr().err == (
        f"cannot use the state: the state file {folder / 'state.json'} cannot be read: "
        "Permission denied (EACCES)\n"
    )
