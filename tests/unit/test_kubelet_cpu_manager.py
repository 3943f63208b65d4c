"""The enforcer does not start beside kubelet's CPU manager `static` (it reads kubelet's
cpu_manager_state): both programs, `run` and `nri`, exit 1 naming the policy, the file and what
to change; with `none`, no file or a file it cannot read, the check lets it start."""

from __future__ import annotations

import json
import logging
import subprocess
import sys
from pathlib import Path

import pytest

from enforcer.app.errors import StartError
from enforcer.app.kubelet_cpu_manager import check_kubelet_cpu_manager, policy_of

CLI = Path(sys.executable).parent / "resource-enforcer"
# As kubelet 1.37 writes it (the v4 checkpoint: the v2 fields, policyName among them, beside
# `data`) with cpuManagerPolicy: static and kubeReserved cpu 100m.
_DATA = {"policyName": "static", "defaultCpuSet": "0", "entries": {"8f3c": {"app": "1"}}}
STATIC = json.dumps(
    {**_DATA, "checksum": 1234567, "data": json.dumps(_DATA), "dataChecksum": 7654321}
)
NONE = json.dumps({"policyName": "none", "defaultCpuSet": "", "checksum": 1353318690})


def test_the_policy_is_read_from_kubelets_checkpoint() -> None:
    assert policy_of(STATIC) == "static"
    assert policy_of(NONE) == "none"
    for bad in ("", "{", "[]", '{"policyName": 3}', '"static"'):
        assert policy_of(bad) is None


def test_static_refuses_the_start(tmp_path: Path) -> None:
    (tmp_path / "cpu_manager_state").write_text(STATIC)
    with pytest.raises(StartError) as exc:
        check_kubelet_cpu_manager(str(tmp_path))
    text = str(exc.value)
    assert "'static'" in text and str(tmp_path / "cpu_manager_state") in text
    assert "cpuManagerPolicy: none" in text


@pytest.mark.parametrize("content", [NONE, None, "not json", json.dumps({"x": 1})])
def test_none_missing_or_unreadable_lets_it_start(
    tmp_path: Path, content: str | None, caplog: pytest.LogCaptureFixture
) -> None:
    if content is not None:
        (tmp_path / "cpu_manager_state").write_text(content)
    with caplog.at_level(logging.INFO, logger="enforcer"):
        check_kubelet_cpu_manager(str(tmp_path))
    if content != NONE:
        assert any(r.levelno == logging.WARNING for r in caplog.records)


@pytest.mark.parametrize("command", ["run", "nri"])
def test_the_console_script_exits_1_with_the_reason(tmp_path: Path, command: str) -> None:
    kubelet = tmp_path / "kubelet"
    kubelet.mkdir()
    (kubelet / "cpu_manager_state").write_text(STATIC)
    argv = [
        str(CLI),
        command,
        f"--kubelet-dir={kubelet}",
        f"--state-dir={tmp_path / 'state'}",
        "--metrics-address=",
        "--cluster-config=off",
    ]
    if command == "run":
        argv += [
            f"--runtime-socket={tmp_path / 'none.sock'}",
            f"--relay-socket={tmp_path / 'relay' / 'cri.sock'}",
        ]
    else:
        argv += [f"--nri-socket={tmp_path / 'nri.sock'}"]
    out = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    assert out.returncode == 1, out.stderr
    assert "kubelet's CPU manager policy is 'static'" in out.stderr
    assert not (tmp_path / "relay" / "cri.sock").exists()  # it never served
