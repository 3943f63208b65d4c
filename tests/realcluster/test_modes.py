"""Which mode each real-cluster test runs in, without a cluster (pytest's own collection): what
goes through the relay or the NRI plugin runs on both clusters; the modules marked
``one_mode`` (the webhook, the API-server client) run once, on the cluster the selection
brings up."""

from __future__ import annotations

import re
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

from tests.support.cluster.layout import MODES, REPO

HERE = Path(__file__).parent
# Their subject is the transport: a user of either mode relies on each of them.
BOTH_MODES = {
    "test_placement.py",
    "test_restarts.py",
    "test_resize.py",
    "test_dra.py",
    "test_dra_grouped.py",
    "test_kubelet_cpu_manager.py",
    "test_node_faults.py",
    "test_device_locality.py",
    "test_webhook_down.py",
    "test_balloons.py",
}
ONE_MODE = {"test_admission.py", "test_cert_rotation.py", "test_cluster_config.py"}


def collected(*args: str) -> dict[tuple[str, str], set[str]]:
    """(file, test with its other parameters) -> the modes it is collected in."""
    argv = [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider"]
    out = subprocess.run(
        [*argv, str(HERE), *args], cwd=REPO, capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stdout + out.stderr
    modes: dict[tuple[str, str], set[str]] = defaultdict(set)
    for line in out.stdout.splitlines():
        m = re.fullmatch(r"tests/realcluster/(test_\w+\.py)::(\w+)\[(\w+)(-[^\]]+)?\]", line)
        if m and m[3] in MODES:
            modes[(m[1], m[2] + (m[4] or ""))].add(m[3])
    return modes


def files(modes: dict[tuple[str, str], set[str]]) -> set[str]:
    return {f for f, _ in modes}


def test_transport_tests_run_on_both_clusters_the_others_on_the_first() -> None:
    modes = collected()
    assert files(modes) >= BOTH_MODES | ONE_MODE, files(modes)
    for (f, test), got in modes.items():
        if f in BOTH_MODES:
            assert got == set(MODES), f"{f}::{test} runs in {got}, not both modes"
        elif f in ONE_MODE:
            assert got == {MODES[0]}, f"{f}::{test} runs in {got}, not once in {MODES[0]}"


def test_a_one_mode_test_runs_on_the_cluster_selected() -> None:
    for mode in MODES:
        modes = collected("-k", mode)
        for f in ONE_MODE:
            tests = {t for (g, t) in modes if g == f}
            assert tests, f"{f} is left out of -k {mode}"
            assert all(modes[(f, t)] == {mode} for t in tests), modes


def test_not_cluster_still_leaves_every_cluster_test_out() -> None:
    modes = collected("-m", "not cluster")
    assert not files(modes) & (BOTH_MODES | ONE_MODE), modes
