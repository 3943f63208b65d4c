"""The enforcer's relay against direct calls to the same containerd, in the same run.

    make bench                    # all benchmarks
    .venv/bin/python -m bench relay [--calls 2000] [--cycles 300] [--no-go]
    .venv/bin/python -m bench relay --create-only [--cycles 300]   # CreateContainer alone

Starts a private containerd and `resource-enforcer run` (console script, static policy, state
persisted as in production). Measures, in alternating rounds so machine noise hits both alike:
p50/p99 of Version, ListContainers and ContainerStatus with 1 and 8 concurrent clients
(threads sharing one channel, as kubelet shares one connection); and container cycles
(CreateContainer, StartContainer, StopContainer, RemoveContainer) in a running pod, with
CreateContainer timed on its own. Also the relay process's CPU time (user + system, read from
/proc) per relayed call of each unary case: the figure least disturbed by other work on the
machine. Prints a table and the ratios; writes bench/results/relay.json (relay-create.json
with --create-only).

With Go (bench/baselines, `bench.gobuild`), first the passthrough as kubelet drives it: the Go
CRI client, unary calls on one connection, 1 and 8 at once, against containerd directly, the
relay, a grpc-go passthrough proxy, and the floor under any relay: do-nothing byte pipes in Go
(bench/baselines/bytepipe) and in Python on uvloop (bench/pipe.py), round by round; the servers
pinned to CPU 0 and the client to CPU 1, with each server's CPU seconds per 1000 calls and peak
RSS.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

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


def task_cpu_seconds(pid: int) -> float:
    """CPU time of every thread of `pid` so far, to the nanosecond (/proc/PID/task/*/schedstat:
    the scheduler's own account, not rounded to clock ticks as /proc/PID/stat is)."""
    total = 0
    for tid in os.listdir(f"/proc/{pid}/task"):
        with contextlib.suppress(OSError):
            total += int(Path(f"/proc/{pid}/task/{tid}/schedstat").read_text().split()[0])
    return total / 1e9


def cycle(
    kubelet: KubeletEmulator, pod, attempt: int, cpu_of: int | None = None
) -> tuple[float, float, float]:
    """One create-start-stop-remove; returns (CreateContainer seconds, whole cycle seconds,
    CPU seconds process `cpu_of` spent while CreateContainer ran, 0 without it)."""
    request = kubelet.create_request(pod, "app", attempt=attempt)
    cpu = task_cpu_seconds(cpu_of) if cpu_of is not None else 0.0
    start = time.perf_counter()
    cid = kubelet.runtime.CreateContainer(request).container_id
    created = time.perf_counter()
    if cpu_of is not None:
        cpu = task_cpu_seconds(cpu_of) - cpu
    kubelet.runtime.StartContainer(api_pb2.StartContainerRequest(container_id=cid))
    kubelet.runtime.StopContainer(api_pb2.StopContainerRequest(container_id=cid, timeout=0))
    kubelet.runtime.RemoveContainer(api_pb2.RemoveContainerRequest(container_id=cid))
    return created - start, time.perf_counter() - start, cpu


def pin_process(pid: int, cpu: int) -> None:
    """Every thread of `pid` on `cpu` (threads made later inherit it)."""
    for tid in os.listdir(f"/proc/{pid}/task"):
        with contextlib.suppress(OSError):
            os.sched_setaffinity(int(tid), {cpu})


def start_helper(
    command: list[str], listen: str, backend: str, cpu: int | None
) -> subprocess.Popen[bytes]:
    """A baseline server in front of `backend` (the grpc-go proxy, a byte pipe), on `cpu`,
    once its socket is there."""
    cmd = [*command, "--listen", listen, "--backend", backend]
    if cpu is not None:
        cmd = ["taskset", "-c", str(cpu), *cmd]
    helper = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, cwd=Path(__file__).parent.parent)
    deadline = time.monotonic() + 10
    while not os.path.exists(listen):
        if helper.poll() is not None or time.monotonic() > deadline:
            helper.kill()
            raise RuntimeError(f"{command[0]} did not serve {listen}")
        time.sleep(0.05)
    return helper


def peak_rss_mib(pid: int) -> float | None:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return round(int(line.split()[1]) / 1024, 1)
    return None


GO_CASES = {
    # name: (method, request)
    "Version": ("/runtime.v1.RuntimeService/Version", api_pb2.VersionRequest(version="v1")),
    "ListContainers": (
        "/runtime.v1.RuntimeService/ListContainers",
        api_pb2.ListContainersRequest(),
    ),
    "ContainerStatus": ("/runtime.v1.RuntimeService/ContainerStatus", None),
}


# Per-call deadlines of the Go client: kubelet's (its runtime-request-timeout), then 10 s.
DEADLINES = ("2m", "10s")


def go_calls(
    client: Path,
    socket: str,
    method: str,
    request: bytes,
    calls: int,
    clients: int,
    cpu: int | None,
    deadline: str = "2m",
) -> dict[str, float]:
    cmd = [
        str(client), "-socket", socket, "-method", method, "-request", request.hex(),
        "-calls", str(calls), "-concurrency", str(clients), "-timeout", deadline,
    ]  # fmt: skip
    if cpu is not None:
        cmd = ["taskset", "-c", str(cpu), *cmd]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True, timeout=300)
    figures: dict[str, float] = json.loads(out.stdout)
    if figures["errors"]:
        raise RuntimeError(f"{method} through {socket}: {figures['errors']} calls failed")
    return figures


def go_passthrough(
    go: dict[str, Path],
    sockets: dict[str, str],
    pids: dict[str, int],
    container_id: str,
    calls: int,
    rounds: int,
    client_cpu: int | None,
    deadlines: tuple[str, ...] = DEADLINES,
) -> dict[str, dict[str, float]]:
    """Unary calls from the Go client, 1 and 8 at once on one connection, alternating direct,
    relay and the grpc-go proxy round by round; p50 is the median of the rounds' p50s.

    Each call has its own deadline, as kubelet gives each: its runtime-request-timeout (2m),
    which grpc-go sends as grpc-timeout rounded up to the millisecond (120000m in nearly every
    call, an indexed field once the peer's HPACK table holds it); and 10 s, the figure of
    earlier runs, whose grpc-timeout (in microseconds) is new in some calls (a literal field
    that changes the table)."""
    results: dict[str, dict[str, float]] = {}
    for deadline, clients in ((d, c) for d in deadlines for c in (1, 8)):
        for name, (method, message) in GO_CASES.items():
            if message is None:
                message = api_pb2.ContainerStatusRequest(container_id=container_id)
            request = message.SerializeToString()
            per: dict[str, list[dict[str, float]]] = {side: [] for side in sockets}
            cpu: dict[str, float] = {side: 0.0 for side in sockets}
            for _ in range(rounds):
                for side, sock in sockets.items():
                    client = go["criclient"]
                    go_calls(client, sock, method, request, 100, clients, client_cpu, deadline)
                    before = cpu_seconds(pids[side]) if side in pids else 0.0
                    figures = go_calls(
                        client, sock, method, request, calls, clients, client_cpu, deadline
                    )
                    per[side].append(figures)
                    if side in pids:
                        cpu[side] += cpu_seconds(pids[side]) - before
            key = f"{name} x{clients} deadline {deadline}"
            row: dict[str, float] = {}
            for side, runs in per.items():
                row[f"{side}_p50_us"] = round(statistics.median(r["p50_us"] for r in runs))
                row[f"{side}_p99_us"] = round(statistics.median(r["p99_us"] for r in runs))
                if side in pids:
                    row[f"{side}_cpu_s_per_1000"] = round(cpu[side] / (calls * rounds) * 1000, 3)
            for side in sockets:
                if side != "direct":
                    ratios = [
                        r["p50_us"] / d["p50_us"]
                        for r, d in zip(per[side], per["direct"], strict=True)
                    ]
                    row[f"{side}_p50_ratio"] = round(statistics.median(ratios), 2)
            results[key] = row
    return results


# The goal on the relay's p50 with the Go client, one at a time (issue 16).
RELAY_GOAL = 1.6


def ratio_summary(go_results: dict[str, dict[str, float]]) -> list[str]:
    """The p50 ratios to direct, side by side with the floor (the byte pipes), per case."""
    lines = [f"p50 / direct, side by side (the relay's goal with 1 client: <= {RELAY_GOAL}):"]
    for case, figures in go_results.items():
        sides = [k.removesuffix("_p50_ratio") for k in figures if k.endswith("_p50_ratio")]
        lines.append(
            f"  {case:30s} " + "  ".join(f"{side} {figures[f'{side}_p50_ratio']}" for side in sides)
        )
    lines.append(
        "  (the byte pipes parse nothing: what any relay in Go or in Python pays before its work)"
    )
    return lines


def python_client(
    cases: dict[str, dict[str, Callable[[], object]]], pid: int, calls: int, rounds: int
) -> dict[str, dict[str, float]]:
    """The unary cases from grpcio (threads sharing one channel), 1 and 8 at once, direct and
    relay alternating round by round; the relay's CPU time per call."""
    results: dict[str, dict[str, float]] = {}
    for clients in (1, 8):
        for name in cases["direct"]:
            samples: dict[str, list[float]] = {"direct": [], "relay": []}
            relay_cpu = 0.0
            for _ in range(rounds):
                for side in ("direct", "relay"):
                    call = cases[side][name]
                    timed_calls(call, 50, clients)  # warm-up
                    before = cpu_seconds(pid)
                    samples[side] += timed_calls(call, calls, clients)
                    if side == "relay":
                        relay_cpu += cpu_seconds(pid) - before
            row: dict[str, float] = {
                f"{side}_{stat}_us": round(percentile(s, q) * 1e6)
                for side, s in samples.items()
                for stat, q in (("p50", 0.5), ("p99", 0.99))
            }
            direct, relay = (statistics.median(samples[side]) for side in ("direct", "relay"))
            row["p50_ratio"] = round(relay / direct, 2)
            row["relay_cpu_us_per_call"] = round(relay_cpu / len(samples["relay"]) * 1e6)
            results[f"{name} x{clients} (Python client)"] = row
    return results


def container_cycles(
    sides: dict[str, KubeletEmulator], pods: dict[str, Any], count: int, enforcer_pid: int
) -> dict[str, dict[str, float]]:
    """``count`` create-start-stop-remove cycles on each side, CreateContainer timed alone, and
    the enforcer's CPU (every thread) while each relayed CreateContainer ran."""
    creates: dict[str, list[float]] = {"direct": [], "relay": []}
    cycles: dict[str, list[float]] = {"direct": [], "relay": []}
    create_cpu: list[float] = []
    for i in range(count):
        for side, k in sides.items():
            cpu_of = enforcer_pid if side == "relay" else None
            create, whole, cpu = cycle(k, pods[side], attempt=i + 1, cpu_of=cpu_of)
            creates[side].append(create)
            cycles[side].append(whole)
            if side == "relay":
                create_cpu.append(cpu)
    results: dict[str, dict[str, float]] = {}
    for label, data in (
        ("CreateContainer (state written, fsync)", creates),
        ("create-start-stop-remove", cycles),
    ):
        row = {
            f"{side}_{stat}_ms": round(percentile(s, q) * 1e3, 2)
            for side, s in data.items()
            for stat, q in (("p50", 0.5), ("p99", 0.99))
        }
        for stat in ("p50", "p99"):
            row[f"{stat}_added_ms"] = round(row[f"relay_{stat}_ms"] - row[f"direct_{stat}_ms"], 2)
        results[label] = row
    # The decision, the journal write and fsync, the relaying: the figure least moved by what
    # else the machine does.
    results["CreateContainer (state written, fsync)"]["relay_cpu_us_p50"] = round(
        statistics.median(create_cpu) * 1e6
    )
    return results


def durable_writes(folder: Path, size: int, count: int = 60) -> list[float]:
    """Seconds for the state store's durable write (write, fsync, rename, fsync the folder) of
    `size` bytes in `folder`: what CreateContainer waits for on this disk, measured apart."""
    samples = []
    target, tmp = folder / "bench-state.json", folder / ".bench-state.json.tmp"
    for _ in range(count):
        start = time.perf_counter()
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            os.write(fd, b"x" * size)
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, target)
        dir_fd = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)
        samples.append(time.perf_counter() - start)
    target.unlink()
    return samples


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench relay", description=__doc__)
    parser.add_argument("--calls", type=int, default=2000, help="calls per case and side")
    parser.add_argument("--rounds", type=int, default=4, help="alternating rounds")
    # 300: a p99 over 60 creates is their worst one; the goal is on the p99.
    parser.add_argument("--cycles", type=int, default=300, help="container cycles per side")
    parser.add_argument("--no-go", action="store_true", help="only the Python client")
    parser.add_argument("--no-pin", action="store_true", help="do not pin servers and client")
    parser.add_argument(
        "--deadlines",
        default=",".join(DEADLINES),
        help="the Go client's per-call deadlines, comma-separated (kubelet's is 2m)",
    )
    parser.add_argument("--no-python", action="store_true", help="only the Go client's figures")
    parser.add_argument(
        "--create-only",
        action="store_true",
        help="only the container cycles (CreateContainer's added latency), no unary cases",
    )
    args = parser.parse_args(argv)
    reason = containerd_available()
    if reason:
        print(f"needs a real containerd: {reason}")
        return 1
    go = None
    if not args.no_go and not args.create_only:
        from bench.gobuild import build

        go = build(("criclient", "grpcproxy", "bytepipe"))
    pinned = not args.no_pin and len(os.sched_getaffinity(0)) >= 2
    server_cpu, client_cpu = (0, 1) if pinned else (None, None)
    results: dict[str, dict[str, float]] = {}
    go_results: dict[str, dict[str, float]] = {}
    memory: dict[str, float | None] = {}
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
        helpers: list[subprocess.Popen[bytes]] = []
        try:
            assert enforcer.proc is not None
            pids = {"relay": enforcer.proc.pid}
            if server_cpu is not None:
                pin_process(enforcer.proc.pid, server_cpu)
            sockets = {"direct": ctrd.socket, "relay": enforcer.relay_socket}
            if go is not None:
                # The grpc-go proxy, and the floor under any relay: byte pipes that parse
                # nothing, in Go and on the relay's own event loop (bench/pipe.py).
                floors = {
                    "grpc-go proxy": [str(go["grpcproxy"])],
                    "Go byte pipe": [str(go["bytepipe"])],
                    "Python byte pipe": [sys.executable, "-m", "bench.pipe"],
                }
                for side, command in floors.items():
                    sock = str(Path(tmp, side.replace(" ", "-") + ".sock"))
                    helper = start_helper(command, sock, ctrd.socket, server_cpu)
                    helpers.append(helper)
                    sockets[side] = sock
                    pids[side] = helper.pid
            sides = {
                "direct": KubeletEmulator(ctrd.socket, log_root=Path(tmp, "pods-d")),
                "relay": KubeletEmulator(enforcer.relay_socket, log_root=Path(tmp, "pods-r")),
            }
            pods = {
                side: k.run_pod(manifest(f"bench-{side}", sleeper("app")))
                for side, k in sides.items()
            }
            if go is not None:
                go_results = go_passthrough(
                    go,
                    sockets,
                    pids,
                    pods["direct"].container_id("app"),
                    args.calls // args.rounds,
                    args.rounds,
                    client_cpu,
                    tuple(args.deadlines.split(",")),
                )
            assert enforcer.proc is not None
            if not args.no_python and not args.create_only:
                if client_cpu is not None:
                    os.sched_setaffinity(0, {client_cpu})
                cases = {
                    side: unary_cases(k.runtime, pods[side].container_id("app"))
                    for side, k in sides.items()
                }
                results.update(
                    python_client(cases, enforcer.proc.pid, args.calls // args.rounds, args.rounds)
                )
            if not args.no_python or args.create_only:
                if client_cpu is not None:
                    os.sched_setaffinity(0, {client_cpu})
                results.update(container_cycles(sides, pods, args.cycles, enforcer.proc.pid))
                state_file = Path(enforcer.state_dir, "state.json")
                size = state_file.stat().st_size if state_file.exists() else 4096
                writes = durable_writes(Path(enforcer.state_dir), size)
                results["durable state write alone (this disk)"] = {
                    "p50_ms": round(percentile(writes, 0.5) * 1e3, 2),
                    "p99_ms": round(percentile(writes, 0.99) * 1e3, 2),
                }
            for side, pid in pids.items():
                memory[side] = peak_rss_mib(pid)
            for k in sides.values():
                k.close()
        finally:
            for helper in helpers:
                helper.terminate()
                helper.wait(10)
            enforcer.stop()
    pinning = "servers on CPU 0, clients on CPU 1" if pinned else "not pinned"
    if go_results:
        print(f"Go CRI client (unary, one connection; {pinning}), medians of {args.rounds} rounds:")
        for case, figures in go_results.items():
            print(f"  {case:20s} " + "  ".join(f"{k}={v}" for k, v in figures.items()))
        for line in ratio_summary(go_results):
            print(line)
    elif not args.no_go and not args.create_only:
        print("Go CRI client and grpc-go proxy: not run (Go missing, see above)")
    print("Python client (grpcio) and container cycles:")
    for case, figures in results.items():
        print(f"  {case:40s} " + "  ".join(f"{k}={v}" for k, v in figures.items()))
    print("peak RSS (MiB): " + ", ".join(f"{k} {v}" for k, v in memory.items()))
    RESULTS.mkdir(exist_ok=True)
    out = {"go_client": go_results, "python_client": results, "peak_rss_mib": memory}
    name = "relay-create.json" if args.create_only else "relay.json"
    (RESULTS / name).write_text(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
