"""The NRI plugin's added CreateContainer latency: containerd 1.7 with NRI on and no plugin,
against the same containerd with `resource-enforcer nri` registered, in the same run.

    .venv/bin/python -m bench nri [--cycles 60] [--rounds 3]

Starts a private containerd 1.7 (tests.support.containerd17) and a pod through the kubelet
emulator talking straight to containerd. In alternating rounds (machine noise hits both
alike), container cycles (CreateContainer, StartContainer, StopContainer, RemoveContainer) run
with no plugin registered, then with the plugin (console script, static policy, state persisted
as in production) registered and synchronized. Prints p50/p99 of CreateContainer and of the
whole cycle for both sides and what the plugin adds; writes bench/results/nri.json.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
from pathlib import Path

from bench.relay import RESULTS, cycle, percentile
from tests.support.containerd17 import NriContainerd, containerd17_available
from tests.support.kubelet import KubeletEmulator
from tests.support.nri_enforcer import NriEnforcerProcess
from tests.support.pods import manifest, sleeper


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench nri", description=__doc__)
    parser.add_argument("--cycles", type=int, default=60, help="container cycles per side")
    parser.add_argument("--rounds", type=int, default=3, help="alternating rounds")
    args = parser.parse_args(argv)
    reason = containerd17_available()
    if reason:
        print(f"needs containerd 1.7 with NRI: {reason}")
        return 1
    per_round = max(1, args.cycles // args.rounds)
    creates: dict[str, list[float]] = {"no_plugin": [], "plugin": []}
    cycles: dict[str, list[float]] = {"no_plugin": [], "plugin": []}
    plugin_cpu: list[float] = []  # the plugin's CPU (every thread) while a create ran
    with tempfile.TemporaryDirectory(prefix="kre-bench-nri-") as tmp, NriContainerd() as ctrd:
        config = Path(tmp, "config.yaml")
        config.write_text('policy: {name: static, reservedCPUs: "0"}\n')
        plugin = NriEnforcerProcess(
            Path(tmp, "plugin"),
            nri_socket=ctrd.nri_socket,
            config=str(config),
            # info, as in production (its per-container lines are part of the cost); the
            # later flag wins over the helper's debug.
            extra_args=["--log-level", "info"],
        )
        with KubeletEmulator(ctrd.socket, log_root=Path(tmp, "pods")) as kubelet:
            pod = kubelet.run_pod(manifest("bench-nri", sleeper("app"), namespace="bench"))
            attempt = 0
            for _ in range(args.rounds):
                for side in ("no_plugin", "plugin"):
                    if side == "plugin":
                        plugin.start()
                    try:
                        cycle(kubelet, pod, attempt=attempt + 1)  # warm-up
                        attempt += 1
                        pid = plugin.proc.pid if side == "plugin" and plugin.proc else None
                        for _ in range(per_round):
                            attempt += 1
                            create, whole, cpu = cycle(kubelet, pod, attempt=attempt, cpu_of=pid)
                            creates[side].append(create)
                            cycles[side].append(whole)
                            if pid is not None:
                                plugin_cpu.append(cpu)
                    finally:
                        if side == "plugin":
                            plugin.stop()
    results: dict[str, dict[str, float]] = {}
    for label, data in (("CreateContainer", creates), ("create-start-stop-remove", cycles)):
        figures = {
            f"{side}_{stat}_ms": round(percentile(s, q) * 1e3, 2)
            for side, s in data.items()
            for stat, q in (("p50", 0.5), ("p99", 0.99))
        }
        for stat in ("p50", "p99"):
            figures[f"{stat}_added_ms"] = round(
                figures[f"plugin_{stat}_ms"] - figures[f"no_plugin_{stat}_ms"], 2
            )
        results[label] = figures
    results["CreateContainer"]["plugin_cpu_us_p50"] = round(statistics.median(plugin_cpu) * 1e6)
    for case, figures in results.items():
        print(f"{case:28s} " + "  ".join(f"{k}={v}" for k, v in figures.items()))
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "nri.json").write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    import sys

    sys.exit(main(sys.argv[1:]))
