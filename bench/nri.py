"""The NRI plugin's added CreateContainer latency and CPU per event, beside a minimal Go NRI
plugin and beside no plugin, in the same run, on containerd 2.4.2.

    .venv/bin/python -m bench nri [--cycles 60] [--rounds 3] [--runtime containerd2.4]

Starts a private containerd of the matrix with NRI on (tests.support.runtimes; default 2.4.2,
the newest) and a Guaranteed 1-CPU pod through the kubelet emulator talking straight to
containerd. In alternating rounds (machine noise hits every side alike), container cycles
(CreateContainer, StartContainer, StopContainer, RemoveContainer) run with **no plugin**
registered, with **ours** (`resource-enforcer nri`, the console script, static policy, state
persisted as in production) and with **go** (bench/baselines/nriplugin: NRI's Go stub, one
exclusive CPU per 1-CPU Guaranteed container, nothing persisted; built by its build.sh from the
Go module proxy, cached). Before a plugin's round, a container is created until its cgroup shows
the exclusive CPU (the plugin registered, synchronized and doing the job). Prints p50/p99 of
CreateContainer and of the whole cycle per side, what each plugin adds over no plugin, our
added/Go's added, and each plugin's CPU per CreateContainer; writes bench/results/nri.json.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

from bench.relay import RESULTS, cycle, percentile
from enforcer.cri import api_pb2
from tests.support.kubelet import KubeletEmulator, RunningPod
from tests.support.nri_enforcer import NriEnforcerProcess
from tests.support.pods import guaranteed, manifest, sleeper
from tests.support.runtimes import RELEASES, NriContainerd

GO_BUILD = Path(__file__).resolve().parent / "baselines" / "nriplugin" / "build.sh"
SIDES = ("no_plugin", "ours", "go")


def build_go() -> str:
    done = subprocess.run([str(GO_BUILD)], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"the Go NRI baseline did not build:\n{done.stderr[-3000:]}")
    return done.stdout.strip().splitlines()[-1]


def exclusive_shown(kubelet: KubeletEmulator, pod: RunningPod, attempt: int, want: str) -> bool:
    """Create and start a container; True when its real cgroup has ``want`` as cpuset."""
    runtime = kubelet.runtime
    cid = runtime.CreateContainer(kubelet.create_request(pod, "app", attempt=attempt)).container_id
    try:
        runtime.StartContainer(api_pb2.StartContainerRequest(container_id=cid))
        path = Path("/sys/fs/cgroup/cpuset", pod.cgroup_parent.lstrip("/"), cid, "cpuset.cpus")
        return path.read_text().strip() == want
    finally:
        runtime.StopContainer(api_pb2.StopContainerRequest(container_id=cid, timeout=0))
        runtime.RemoveContainer(api_pb2.RemoveContainerRequest(container_id=cid))


class GoPlugin:
    """The Go baseline as a process on the runtime's NRI socket."""

    def __init__(self, binary: str, socket: str, cpus: str) -> None:
        self.command = [binary, "-nri-socket", socket, "-cpus", cpus, "-plugin-name", "go-baseline"]
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        self.proc = subprocess.Popen(
            self.command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.terminate()
            self.proc.wait(10)
            self.proc = None


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench nri", description=__doc__)
    parser.add_argument("--cycles", type=int, default=60, help="container cycles per side")
    parser.add_argument("--rounds", type=int, default=3, help="alternating rounds")
    parser.add_argument(
        "--runtime", default="containerd2.4", choices=("containerd2.4", "containerd1.7")
    )
    args = parser.parse_args(argv)
    reason = RELEASES[args.runtime].unavailable()
    if reason:
        print(f"needs {args.runtime} with NRI: {reason}")
        return 1
    go_binary = build_go()
    online = Path("/sys/fs/cgroup/cpuset/cpuset.cpus").read_text().strip()
    reserved, exclusive = "0", str(max(int(c) for c in _cpus(online)))
    per_round = max(1, args.cycles // args.rounds)
    creates: dict[str, list[float]] = {side: [] for side in SIDES}
    cycles: dict[str, list[float]] = {side: [] for side in SIDES}
    cpu: dict[str, list[float]] = {"ours": [], "go": []}  # the plugin's CPU while a create ran
    with (
        tempfile.TemporaryDirectory(prefix="kre-bench-nri-") as tmp,
        NriContainerd(Path(tmp, "containerd"), release=args.runtime) as ctrd,
    ):
        config = Path(tmp, "config.yaml")
        config.write_text(f'policy: {{name: static, reservedCPUs: "{reserved}"}}\n')
        ours = NriEnforcerProcess(
            Path(tmp, "plugin"),
            nri_socket=ctrd.nri_socket,
            config=str(config),
            # info, as in production (its per-container lines are part of the cost); the
            # later flag wins over the helper's debug.
            extra_args=["--log-level", "info"],
        )
        go = GoPlugin(go_binary, ctrd.nri_socket, exclusive)
        with KubeletEmulator(ctrd.socket, log_root=Path(tmp, "pods")) as kubelet:
            pod = kubelet.run_pod_sandbox(
                manifest("bench-nri", sleeper("app", resources=guaranteed("1")), namespace="bench")
            )
            attempt = 0
            for _ in range(args.rounds):
                for side in SIDES:
                    pid = None
                    if side == "ours":
                        ours.start()
                        pid = ours.proc.pid if ours.proc else None
                    elif side == "go":
                        go.start()
                        pid = go.proc.pid if go.proc else None
                    try:
                        want = online if side == "no_plugin" else exclusive
                        deadline = time.monotonic() + 30
                        while True:  # registered, synchronized, pinning: else no figures
                            attempt += 1
                            if exclusive_shown(kubelet, pod, attempt, want):
                                break
                            if time.monotonic() > deadline:
                                raise SystemExit(f"{side}: the container never got cpus {want}")
                            time.sleep(0.2)
                        for _ in range(per_round):
                            attempt += 1
                            create, whole, used = cycle(kubelet, pod, attempt=attempt, cpu_of=pid)
                            creates[side].append(create)
                            cycles[side].append(whole)
                            if pid is not None:
                                cpu[side].append(used)
                    finally:
                        if side == "ours":
                            ours.stop()
                        elif side == "go":
                            go.stop()
            kubelet.remove_pod(pod)
    results = figures(creates, cycles, cpu)
    results["run"] = {"runtime": args.runtime, "cycles_per_side": per_round * args.rounds}
    for case, numbers in results.items():
        print(f"{case:28s} " + "  ".join(f"{k}={v}" for k, v in numbers.items()))
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "nri.json").write_text(json.dumps(results, indent=2))
    return 0


def _cpus(text: str) -> list[int]:
    out: list[int] = []
    for part in text.split(","):
        lo, _, hi = part.partition("-")
        out.extend(range(int(lo), int(hi or lo) + 1))
    return out


def figures(
    creates: dict[str, list[float]], cycles: dict[str, list[float]], cpu: dict[str, list[float]]
) -> dict[str, dict[str, float | str]]:
    results: dict[str, dict[str, float | str]] = {}
    for label, data in (("CreateContainer", creates), ("create-start-stop-remove", cycles)):
        numbers: dict[str, float | str] = {
            f"{side}_{stat}_ms": round(percentile(s, q) * 1e3, 2)
            for side, s in data.items()
            for stat, q in (("p50", 0.5), ("p99", 0.99))
        }
        for stat in ("p50", "p99"):
            base = float(numbers[f"no_plugin_{stat}_ms"])
            for side in ("ours", "go"):
                numbers[f"{side}_{stat}_added_ms"] = round(
                    float(numbers[f"{side}_{stat}_ms"]) - base, 2
                )
        results[label] = numbers
    creates_row = results["CreateContainer"]
    for side in ("ours", "go"):
        creates_row[f"{side}_cpu_us_p50"] = round(statistics.median(cpu[side]) * 1e6)
    creates_row["cpu_ours_over_go"] = round(
        statistics.median(cpu["ours"]) / statistics.median(cpu["go"]), 2
    )
    for stat in ("p50", "p99"):
        go_added = float(creates_row[f"go_{stat}_added_ms"])
        ratio = float(creates_row[f"ours_{stat}_added_ms"]) / go_added if go_added > 0 else None
        creates_row[f"added_ours_over_go_{stat}"] = (
            round(ratio, 2) if ratio is not None else "n/a (Go added nothing measurable)"
        )
    return results


if __name__ == "__main__":
    import sys

    sys.exit(main(sys.argv[1:]))
