"""`resource-enforcer nri`'s command line: the contract's flags and defaults, and what it does
without a runtime (keeps trying to register, stops cleanly on SIGTERM)."""

from __future__ import annotations

import signal
import time
from pathlib import Path

import pytest

from enforcer.cli import parser
from tests.support.nri_enforcer import NriEnforcerProcess


def test_flags_and_defaults_of_the_contract() -> None:
    args = parser().parse_args(["nri"])
    assert (args.nri_socket, args.plugin_name, args.plugin_index) == (
        "/var/run/nri/nri.sock",
        "resource-enforcer",
        "90",
    )
    assert (args.state_dir, args.sysfs_root, args.cgroupfs_root, args.resctrl_root) == (
        "/var/lib/resource-enforcer",
        "/sys",
        "/sys/fs/cgroup",
        "/sys/fs/resctrl",
    )
    args = parser().parse_args(
        ["nri", "--plugin-index", "05", "--grace-period", "3", "--log-format", "json"]
    )
    assert (args.plugin_index, args.grace_period, args.log_format) == ("05", 3.0, "json")
    # Not the relay's sockets.
    with pytest.raises(SystemExit):
        parser().parse_args(["nri", "--relay-socket", "/x"])


@pytest.mark.parametrize("index", ["9", "100", "ab", "-1"])
def test_plugin_index_is_two_digits(index: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        parser().parse_args(["nri", "--plugin-index", index])
    assert "two-digit index" in capsys.readouterr().err


def test_without_a_runtime_it_keeps_trying_and_stops_cleanly(tmp_path: Path) -> None:
    proc = NriEnforcerProcess(tmp_path, nri_socket=str(tmp_path / "absent.sock"))
    proc.start(wait=False)
    try:
        deadline = time.monotonic() + 10
        while proc.log_tail().count("cannot register with the runtime") < 2:
            assert time.monotonic() < deadline, proc.log_tail()
            time.sleep(0.1)
    finally:
        code = proc.stop(signal.SIGTERM)
    assert code == 0, proc.log_tail()
    assert (tmp_path / "state" / "state.json").exists()


def test_docs_name_the_flags_and_defaults_the_command_line_has() -> None:
    text = (Path(__file__).resolve().parents[2] / "docs" / "nri.md").read_text()
    for flag, default in (
        ("--nri-socket PATH", "/var/run/nri/nri.sock"),
        ("--plugin-name NAME", "resource-enforcer"),
        ("--plugin-index NN", "90"),
    ):
        (row,) = [line for line in text.splitlines() if line.startswith(f"| `{flag}")]
        assert f"`{default}`" in row, row
    dests = {a.dest for a in parser()._subparsers._group_actions[0].choices["nri"]._actions}
    for option in ("state_dir", "config", "sysfs_root", "cgroupfs_root", "resctrl_root"):
        assert option in dests
        assert f"`--{option.replace('_', '-')}`" in text
