"""`check-config` and `plan` through the console script: bad input of every kind the probe of
issue 28 found is exit 1 with one clear line naming the file and the key path, never a
traceback, a hang or all of memory: cpusets that once passed and then crashed (with and without
`--sysfs-root`), booleans read as numbers, files that are not UTF-8, nesting, FIFOs under
`--sysfs-root`, negative requests, and a billion replicas."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

EXE = str(Path(sys.executable).parent / "resource-enforcer")

POD = """\
apiVersion: v1
kind: Pod
metadata: {name: web}
spec:
  containers: [{name: app, image: x, resources: {limits: {cpu: "1", memory: 1Gi}}}]
"""


def run(*args: str) -> subprocess.CompletedProcess[str]:
    # The timeout is only a fence against a hang (a FIFO read once blocked for ever).
    return subprocess.run([EXE, *args], capture_output=True, text=True, timeout=120)


def clean(out: subprocess.CompletedProcess[str]) -> None:
    for bad in ("Traceback", "Error:", "RecursionError", "UnicodeDecodeError", "ValueError"):
        assert bad not in out.stderr and bad not in out.stdout, out.stderr


@pytest.fixture
def server(snapshot_roots: dict[str, Path]) -> Path:
    return snapshot_roots["server"]


CPUSETS = [
    ('"3-1"', "range '3-1' is reversed"),
    ('"0-9000"', "9000 is above the limit 8191"),
    ('"70000"', "70000 is above the limit 8191"),
    ('"\u0663"', "is not a CPU id or range (ASCII digits"),
    ('"1,,2"', "an empty element"),
    ('"+1"', "'+1' is not a CPU id or range"),
    ('"1\u2003"', "is not a CPU id or range"),
]


@pytest.mark.parametrize("with_sysfs", [False, True], ids=["alone", "sysfs-root"])
@pytest.mark.parametrize(("value", "why"), CPUSETS)
def test_check_config_refuses_bad_cpusets_with_the_key_path(
    tmp_path: Path, server: Path, value: str, why: str, with_sysfs: bool
) -> None:
    for key in ("reservedCPUs", "availableCPUs"):
        config = tmp_path / "c.yaml"
        config.write_text(f"policy:\n  name: static\n  {key}: {value}\n", encoding="utf-8")
        extra = ("--sysfs-root", str(server)) if with_sysfs else ()
        out = run("check-config", str(config), *extra)
        assert out.returncode == 1, out.stdout
        assert out.stdout.startswith(f"policy.{key}: "), out.stdout
        assert why in out.stdout
        clean(out)


@pytest.mark.parametrize(("value", "why"), CPUSETS[:3])
def test_plan_refuses_bad_cpusets(tmp_path: Path, server: Path, value: str, why: str) -> None:
    config = tmp_path / "c.yaml"
    config.write_text(f"policy:\n  name: static\n  reservedCPUs: {value}\n", encoding="utf-8")
    pods = tmp_path / "pods.yaml"
    pods.write_text(POD)
    out = run("plan", "--config", str(config), "--sysfs-root", str(server), "--pods", str(pods))
    assert out.returncode == 1
    assert f"{config}: policy.reservedCPUs: " in out.stderr and why in out.stderr
    clean(out)


@pytest.mark.parametrize(
    ("section", "key"),
    [
        (
            "policy:\n  name: balloons\n  reservedCPUs: '0'\n  balloonTypes:\n  - name: a\n",
            "minCPUs",
        ),
        ("cpuClasses:\n  turbo:\n", "minFreq"),
        ("nodeResourceTopology:\n", "minIntervalSeconds"),
    ],
)
def test_check_config_refuses_booleans_for_numbers(tmp_path: Path, section: str, key: str) -> None:
    config = tmp_path / "c.yaml"
    indent = " " * (len(section.splitlines()[-1]) - len(section.splitlines()[-1].lstrip()) + 2)
    if section.endswith("- name: a\n"):
        indent = "    "
    config.write_text(f"{section}{indent}{key}: true\n")
    out = run("check-config", str(config))
    assert out.returncode == 1
    assert f"{key}: true is a boolean" in out.stdout, out.stdout
    clean(out)


def test_check_config_and_plan_refuse_a_file_that_is_not_utf8(tmp_path: Path, server: Path) -> None:
    config = tmp_path / "latin1.yaml"
    config.write_bytes(b"policy:\n  name: static\n  reservedNamespaces: [caf\xe9]\n")
    out = run("check-config", str(config))
    assert out.returncode == 1
    assert out.stdout.splitlines() == [f"{config}: not UTF-8 text (byte 0xe9 at offset 49)"]
    clean(out)
    good = tmp_path / "good.yaml"
    good.write_text("policy: {name: static, reservedCPUs: '0'}\n")
    out = run("plan", "--config", str(good), "--sysfs-root", str(server), "--pods", str(config))
    assert out.returncode == 1
    assert out.stderr.strip() == f"{config}: not UTF-8 text (byte 0xe9 at offset 49)"


def test_nesting_in_config_and_pods_is_exit_1_with_the_key_path(
    tmp_path: Path, server: Path
) -> None:
    config = tmp_path / "deep.yaml"
    config.write_text("policy:\n  reservedNamespaces: " + "[" * 3000 + "]" * 3000 + "\n")
    out = run("check-config", str(config))
    assert out.returncode == 1
    assert out.stdout.startswith(f"{config}: policy.reservedNamespaces.0.0.0")
    assert "nested more than 32 levels deep" in out.stdout
    clean(out)
    good = tmp_path / "good.yaml"
    good.write_text("policy: {name: static, reservedCPUs: '0'}\n")
    pods = tmp_path / "pods.yaml"
    pods.write_text(POD + "  nodeSelector: {a: " + "[" * 3000 + "]" * 3000 + "}\n")
    out = run("plan", "--config", str(good), "--sysfs-root", str(server), "--pods", str(pods))
    assert out.returncode == 1
    assert out.stderr.startswith(f"{pods}: spec.nodeSelector.a.0.0")
    assert "nested more than 64 levels deep" in out.stderr
    clean(out)


def test_plan_refuses_negative_requests(tmp_path: Path, server: Path) -> None:
    good = tmp_path / "good.yaml"
    good.write_text("policy: {name: static, reservedCPUs: '0'}\n")
    pods = tmp_path / "pods.yaml"
    pods.write_text(POD.replace('limits: {cpu: "1"', 'requests: {cpu: "-1"'))
    out = run("plan", "--config", str(good), "--sysfs-root", str(server), "--pods", str(pods))
    assert out.returncode == 1
    assert "spec.containers[0].resources.requests.cpu: '-1' is negative" in out.stderr
    clean(out)


def test_plan_refuses_a_billion_replicas_before_making_any(tmp_path: Path, server: Path) -> None:
    good = tmp_path / "good.yaml"
    good.write_text("policy: {name: static, reservedCPUs: '0'}\n")
    pods = tmp_path / "pods.yaml"
    pods.write_text(
        "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: big}\nspec:\n"
        "  replicas: 1000000000\n  template:\n    spec:\n"
        "      containers: [{name: app, image: x}]\n"
    )
    out = run("plan", "--config", str(good), "--sysfs-root", str(server), "--pods", str(pods))
    assert out.returncode == 1
    assert f"{pods}: document 0: spec.replicas: 1000000000 pods would make more than 10000" in (
        out.stderr
    )
    clean(out)
    # The bound counts the whole file: 9,999 replicas after two Pods is one too many.
    pods.write_text(
        POD + "---\n" + POD.replace("name: web", "name: web2") + "---\n"
        "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: many}\nspec:\n"
        "  replicas: 9999\n  template:\n    spec:\n"
        "      containers: [{name: app, image: x}]\n"
    )
    out = run("plan", "--config", str(good), "--sysfs-root", str(server), "--pods", str(pods))
    assert out.returncode == 1
    assert "9999 pods would make more than 10000, the most plan places in one run (2 before" in (
        out.stderr
    )


@pytest.fixture
def fifo_sysfs(server: Path, tmp_path: Path) -> Path:
    """The server's sysfs with `devices/system/cpu/online` a FIFO that no one writes."""
    root = tmp_path / "sysfs"
    shutil.copytree(server, root, symlinks=True)
    online = root / "devices" / "system" / "cpu" / "online"
    online.unlink()
    os.mkfifo(online)
    return root


def test_a_fifo_under_sysfs_root_is_refused_not_waited_on(tmp_path: Path, fifo_sysfs: Path) -> None:
    config = tmp_path / "c.yaml"
    config.write_text("policy: {name: static, reservedCPUs: '0'}\n")
    pods = tmp_path / "pods.yaml"
    pods.write_text(POD)
    online = fifo_sysfs / "devices" / "system" / "cpu" / "online"
    want = f"{online}: cannot read: not a regular file (a FIFO); refused unread"
    out = run("plan", "--config", str(config), "--sysfs-root", str(fifo_sysfs), "--pods", str(pods))
    assert out.returncode == 1
    assert out.stderr.strip() == want
    out = run("check-config", str(config), "--sysfs-root", str(fifo_sysfs))
    assert out.returncode == 1
    assert want in out.stdout + out.stderr
    clean(out)


@pytest.mark.parametrize("command", ["run", "nri"])
def test_the_daemons_refuse_such_a_configuration_in_one_line(tmp_path: Path, command: str) -> None:
    """Refused before any socket is touched: the runtime's socket need not exist."""
    latin = tmp_path / "latin1.yaml"
    latin.write_bytes(b"policy:\n  name: static\n  reservedNamespaces: [caf\xe9]\n")
    deep = tmp_path / "deep.yaml"
    deep.write_text("policy:\n  reservedNamespaces: " + "[" * 3000 + "]" * 3000 + "\n")
    reversed_ = tmp_path / "reversed.yaml"
    reversed_.write_text('policy:\n  name: static\n  reservedCPUs: "3-1"\n')
    socket = ["--runtime-socket", str(tmp_path / "none.sock"), "--relay-socket"]
    socket += [str(tmp_path / "relay.sock")]
    if command == "nri":
        socket = ["--nri-socket", str(tmp_path / "none.sock")]
    for config, line in (
        (latin, f"configuration refused: {latin}: not UTF-8 text (byte 0xe9 at offset 49)"),
        (deep, f"configuration refused: {deep}: policy.reservedNamespaces.0.0.0.0.0.0"),
        (reversed_, 'configuration refused: policy.reservedCPUs: "3-1" is not a cpuset'),
    ):
        out = run(command, "--config", str(config), "--state-dir", str(tmp_path / "state"),
                  "--metrics-address", "", *socket)  # fmt: skip
        assert out.returncode == 1
        assert line in out.stderr, out.stderr
        clean(out)
