"""The enforcer's relay against direct calls to the same containerd, in the same run.

    make bench                    # all benchmarks
    .venv/bin/python -m bench relay [--calls 2000] [--cycles 60]

Starts a private containerd and `resource-enforcer run` (console script, static policy, state
persisted as in production). Measures, in alternating rounds so machine noise hits both alike:
p50/p99 of Version, ListContainers and ContainerStatus with 1 and 8 concurrent clients
(threads sharing one channel, as kubelet shares one connection); and container cycles
(CreateContainer, StartContainer, StopContainer, RemoveContainer) in a running pod, with
CreateContainer timed on its own. Also the relay process's CPU time (user + system, read from
/proc) per relayed call of each unary case: the figure least disturbed by other work on the
machine. Prints a table and the ratios; writes bench/results/relay.json.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

from enforcer.cri import api_pb2, api_pb2_grpc
from tests.support.containerd import PrivateContainerd, containerd_available
from tests.support.enforcer_process import EnforcerProcess
from tests.support.kubelet import KubeletEmulator
from tests.support.pods import manifest, sleeper

RESULTS = Path(__file__).resolve().parent / "results"
_TICK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of process ``pid`` (all its threads), from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _TICK


def percentile(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def timed_calls(call: Callable[[], object], count: int, clients: int) -> list[float]:
    samples: list[float] = []
    lock = threading.Lock()
    per_client = max(1, count // clients)

    def worker() -> None:
        mine = []
        for _ in range(per_client):
            start = time.perf_counter()
            call()
            mine.append(time.perf_counter() - start)
        with lock:
            samples.extend(mine)

    threads = [threading.Thread(target=worker) for _ in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return samples


def unary_cases(
    stub: api_pb2_grpc.RuntimeServiceStub, container_id: str
) -> dict[str, Callable[[], object]]:
    return {
        "Version": lambda: stub.Version(api_pb2.VersionRequest(version="v1")),
        "ListContainers": lambda: stub.ListContainers(api_pb2.ListContainersRequest()),
        "ContainerStatus": lambda: stub.ContainerStatus(
            api_pb2.ContainerStatusRequest(container_id=container_id)
        ),
    }


def cycle(kubelet: KubeletEmulator, pod, attempt: int) -> tuple[float, float]:
    """One create-start-stop-remove; returns (CreateContainer seconds, whole cycle seconds)."""
    request = kubelet.create_request(pod, "app", attempt=attempt)
    start = time.perf_counter()
    cid = kubelet.runtime.CreateContainer(request).container_id
    created = time.perf_counter()
    kubelet.runtime.StartContainer(api_pb2.StartContainerRequest(container_id=cid))
    kubelet.runtime.StopContainer(api_pb2.StopContainerRequest(container_id=cid, timeout=0))
    kubelet.runtime.RemoveContainer(api_pb2.RemoveContainerRequest(container_id=cid))
    return created - start, time.perf_counter() - start


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench relay", description=__doc__)
    parser.add_argument("--calls", type=int, default=2000, help="calls per case and side")
    parser.add_argument("--rounds", type=int, default=4, help="alternating rounds")
    parser.add_argument("--cycles", type=int, default=60, help="container cycles per side")
    args = parser.parse_args(argv)
    reason = containerd_available()
    if reason:
        print(f"needs a real containerd: {reason}")
        return 1
    results: dict[str, dict[str, float]] = {}
    with tempfile.TemporaryDirectory(prefix="kre-bench-") as tmp, PrivateContainerd() as ctrd:
        config = Path(tmp, "config.yaml")
        config.write_text('policy: {name: static, reservedCPUs: "0"}\n')
        enforcer = EnforcerProcess(
            Path(tmp, "enforcer"),
            runtime_socket=ctrd.socket,
            config=str(config),
            extra_args=["--log-level", "warning"],
        )
        enforcer.start()
        try:
            sides = {
                "direct": KubeletEmulator(ctrd.socket, log_root=Path(tmp, "pods-d")),
                "relay": KubeletEmulator(enforcer.relay_socket, log_root=Path(tmp, "pods-r")),
            }
            pods = {
                side: k.run_pod(manifest(f"bench-{side}", sleeper("app")))
                for side, k in sides.items()
            }
            cases = {
                side: unary_cases(k.runtime, pods[side].container_id("app"))
                for side, k in sides.items()
            }
            assert enforcer.proc is not None
            pid = enforcer.proc.pid
            for clients in (1, 8):
                for name in cases["direct"]:
                    samples: dict[str, list[float]] = {"direct": [], "relay": []}
                    relay_cpu = 0.0
                    for _ in range(args.rounds):
                        for side in ("direct", "relay"):
                            call = cases[side][name]
                            timed_calls(call, 50, clients)  # warm-up
                            before = cpu_seconds(pid)
                            samples[side] += timed_calls(call, args.calls // args.rounds, clients)
                            if side == "relay":
                                relay_cpu += cpu_seconds(pid) - before
                    key = f"{name} x{clients}"
                    results[key] = {
                        f"{side}_{stat}_us": round(percentile(s, q) * 1e6)
                        for side, s in samples.items()
                        for stat, q in (("p50", 0.5), ("p99", 0.99))
                    }
                    results[key]["p50_ratio"] = round(
                        statistics.median(samples["relay"]) / statistics.median(samples["direct"]),
                        2,
                    )
                    results[key]["relay_cpu_us_per_call"] = round(
                        relay_cpu / len(samples["relay"]) * 1e6
                    )
            creates: dict[str, list[float]] = {"direct": [], "relay": []}
            cycles: dict[str, list[float]] = {"direct": [], "relay": []}
            for i in range(args.cycles):
                for side, k in sides.items():
                    create, whole = cycle(k, pods[side], attempt=i + 1)
                    creates[side].append(create)
                    cycles[side].append(whole)
            for label, data in (("CreateContainer", creates), ("create-start-stop-remove", cycles)):
                results[label] = {
                    f"{side}_{stat}_ms": round(percentile(s, q) * 1e3, 2)
                    for side, s in data.items()
                    for stat, q in (("p50", 0.5), ("p99", 0.99))
                }
                results[label]["p99_added_ms"] = round(
                    results[label]["relay_p99_ms"] - results[label]["direct_p99_ms"], 2
                )
            for k in sides.values():
                k.close()
        finally:
            enforcer.stop()
    for case, figures in results.items():
        print(f"{case:28s} " + "  ".join(f"{k}={v}" for k, v in figures.items()))
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "relay.json").write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    import sys

    sys.exit(main(sys.argv[1:]))
