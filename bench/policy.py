"""Policy decisions: how fast the static and topology-aware policies admit and release.

    .venv/bin/python -m bench policy [--machines M:N,...] [--churn 1000] [--plan-pods 2000]
    .venv/bin/python bench/policy.py ...                    (the same, standalone)

On two machines side by side (default: the recorded 144-CPU 4-socket server with 500
containers, and a generated 2-socket 768-CPU server, `bench/synthetic.py`, with 2,000), for
each policy:

1. place `--containers` containers of mixed QoS (pods of 1-3 containers: Guaranteed 1/2/4
   CPUs, mixed 1500m, Guaranteed 250m, Burstable, BestEffort, a few kube-system daemons);
2. churn: `--churn` times, remove a random pod and create a new one;
3. remove everything.

A decision is one `admit` or `release`; refused admissions count as decisions too. The timed
run is repeated (`--repeat`, 3) and each decision's time is the fastest of its repeats: the
decisions are identical every time, so this filters out what other processes on the machine did
to one run (the first run's raw p99 is printed too). After every fifth churn step the benchmark
also re-evaluates every live container's placement, as the enforcer does after every change to
re-pin shared containers ("sweep"). Peak memory is measured in one more run of the same
decisions under tracemalloc (which slows Python down, so it is not timed). On the 768-CPU
machine, `resource-enforcer plan` over 2,000 pods of the same mix is timed too. Results go to
stdout and to bench/results/policy.json.
"""

from __future__ import annotations

import argparse
import gc
import json
import random
import resource
import statistics
import sys
import tempfile
import time
import tracemalloc
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: make the repository importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from enforcer.decode import ContainerRequest, Preferences
from enforcer.policy import PlacementError, make_policy
from enforcer.sysfs import read_topology
from enforcer.topology import Topology
from resource_contract.policy_config import PolicyConfig
from tests.support.snapshots import SNAPSHOTS, extract_snapshots

GiB = 1 << 30
RESULTS = Path(__file__).resolve().parent / "results" / "policy.json"

# (weight, qos, milli, memory): the container mix.
MIX = [
    (6, "Guaranteed", 1000, GiB),
    (3, "Guaranteed", 2000, 2 * GiB),
    (1, "Guaranteed", 4000, 4 * GiB),
    (2, "Guaranteed", 1500, 2 * GiB),  # mixed
    (10, "Guaranteed", 250, 256 << 20),
    (48, "Burstable", 0, 512 << 20),  # milli drawn from BURSTABLE_MILLI
    (25, "BestEffort", 0, 0),
    (5, "kube-system", 100, 128 << 20),
]
BURSTABLE_MILLI = [50, 100, 100, 200, 250]


@dataclass
class Run:
    admit: list[float] = field(default_factory=list)
    release: list[float] = field(default_factory=list)
    sweep: list[float] = field(default_factory=list)
    refused: int = 0

    @property
    def decisions(self) -> list[float]:
        return self.admit + self.release


class Workload:
    """A seeded stream of pods: every policy sees exactly the same requests."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.count = 0
        self.weights = [w for w, *_ in MIX]

    def pod(self) -> list[ContainerRequest]:
        self.count += 1
        _, qos, milli, memory = self.rng.choices(MIX, self.weights)[0]
        namespace = "default"
        if qos == "kube-system":
            qos, namespace = "Burstable", "kube-system"
        elif qos == "Burstable":
            milli = self.rng.choice(BURSTABLE_MILLI)
        size = self.rng.choice([1, 1, 1, 2, 3])
        return [
            ContainerRequest(
                pod_uid=f"uid-{self.count}",
                pod_name=f"pod-{self.count}",
                namespace=namespace,
                container=f"c{i}",
                qos=qos,  # type: ignore[arg-type]
                cpu_request_milli=milli,
                cpu_limit_milli=milli if qos == "Guaranteed" else 0,
                memory_request=memory,
                memory_limit=memory if qos == "Guaranteed" else 0,
                preferences=Preferences(),
            )
            for i in range(size)
        ]


def run_once(
    topology: Topology, name: str, containers: int, churn: int, seed: int, sweep_every: int = 1
) -> Run:
    policy = make_policy(
        topology, PolicyConfig(name=name, reservedCPUs=2, reservedNamespaces=["kube-system"])
    )
    work = Workload(seed)
    rng = random.Random(seed + 1)
    run = Run()
    live: list[list[str]] = []
    live_count = 0

    def admit_pod() -> None:
        nonlocal live_count
        keys = []
        for request in work.pod():
            start = time.perf_counter()
            try:
                policy.admit(request)
                keys.append(request.key)
            except PlacementError:
                run.refused += 1
            run.admit.append(time.perf_counter() - start)
        live.append(keys)
        live_count += len(keys)

    def release_pod(index: int) -> None:
        nonlocal live_count
        keys = live.pop(index)
        for key in keys:
            start = time.perf_counter()
            policy.release(key)
            run.release.append(time.perf_counter() - start)
        live_count -= len(keys)

    while live_count < containers:
        admit_pod()
    for step in range(churn):
        release_pod(rng.randrange(len(live)))
        admit_pod()
        if step % sweep_every:
            continue
        start = time.perf_counter()
        policy.placements()  # what the engine's re-pinning asks after every change
        run.sweep.append(time.perf_counter() - start)
    while live:
        release_pod(len(live) - 1)
    assert not policy.admitted
    return run


def peak_memory(topology: Topology, name: str, containers: int, churn: int, seed: int) -> int:
    gc.collect()
    tracemalloc.start()
    try:
        # Sweeping allocates the same each time: a few sweeps show their peak, and spare the
        # time that tracemalloc would add to a thousand.
        run_once(topology, name, containers, churn, seed, sweep_every=50)
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def _ms(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return 1000 * ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def fastest(runs: list[Run]) -> Run:
    """Each measurement's fastest repeat (the runs made the same decisions in the same order)."""
    first = runs[0]

    def best(lists: list[list[float]]) -> list[float]:
        assert len({len(values) for values in lists}) == 1, "runs differ"
        return [min(times) for times in zip(*lists, strict=True)]

    return Run(
        admit=best([r.admit for r in runs]),
        release=best([r.release for r in runs]),
        sweep=best([r.sweep for r in runs]),
        refused=first.refused,
    )


def summarize(run: Run, peak: int, raw: Run) -> dict[str, Any]:
    decisions = run.decisions
    return {
        "decisions": len(decisions),
        "refused": run.refused,
        "decisions_per_second": round(len(decisions) / sum(decisions)),
        "decision_p50_ms": round(_ms(decisions, 0.50), 4),
        "decision_p99_ms": round(_ms(decisions, 0.99), 4),
        "decision_max_ms": round(1000 * max(decisions), 3),
        "admit_p99_ms": round(_ms(run.admit, 0.99), 4),
        "release_p99_ms": round(_ms(run.release, 0.99), 4),
        "sweep_p50_ms": round(_ms(run.sweep, 0.50), 3) if run.sweep else None,
        "sweep_p99_ms": round(_ms(run.sweep, 0.99), 3) if run.sweep else None,
        "peak_traced_mib": round(peak / (1 << 20), 2),
        "mean_decision_ms": round(1000 * statistics.fmean(decisions), 4),
        "first_run_decision_p99_ms": round(_ms(raw.decisions, 0.99), 4),
    }


SYNTHETIC = "synthetic-768"
DEFAULT_MACHINES = f"4-socket-server-nosnc:500,{SYNTHETIC}:2000"


def load_machine(name: str, tmp: Path) -> Topology:
    """A recorded snapshot by name, or the generated 2-socket 768-CPU machine."""
    if name == SYNTHETIC:
        from bench.synthetic import write_sysfs

        return read_topology(write_sysfs(tmp / SYNTHETIC))
    return read_topology(extract_snapshots(tmp, [name])[name])


def plan_seconds(sysfs: Path, pods: int, seed: int, tmp: Path) -> tuple[float, int]:
    """`resource-enforcer plan` (the console script) over `pods` pods of the benchmark's mix on
    the machine at `sysfs`, topology-aware: wall seconds and exit code."""
    import subprocess

    import yaml

    work = Workload(seed)
    items = []
    for _ in range(pods):
        containers = work.pod()
        first = containers[0]
        items.append(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": first.pod_name, "namespace": first.namespace},
                "spec": {
                    "containers": [
                        {
                            "name": c.container,
                            "resources": _resources(c.cpu_request_milli, c.memory_request, c.qos),
                        }
                        for c in containers
                    ]
                },
            }
        )
    manifest = tmp / "pods.yaml"
    manifest.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": items}))
    config = tmp / "plan-config.yaml"
    config.write_text(
        "policy: {name: topology-aware, reservedCPUs: 2, reservedNamespaces: [kube-system]}\n"
    )
    exe = Path(sys.executable).parent / "resource-enforcer"
    cmd = [str(exe), "plan", "--config", str(config), "--sysfs-root", str(sysfs)]
    cmd += ["--pods", str(manifest)]
    start = time.perf_counter()
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    return time.perf_counter() - start, done.returncode


def _resources(milli: int, memory: int, qos: str) -> dict[str, Any]:
    if qos == "BestEffort":
        return {}
    requests = {"cpu": f"{milli}m", "memory": str(memory)} if milli else {"memory": str(memory)}
    if qos == "Guaranteed":
        return {"requests": requests, "limits": dict(requests)}
    return {"requests": requests}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench policy",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--machines",
        default=DEFAULT_MACHINES,
        help=f"MACHINE:CONTAINERS,... (a snapshot of tests/testdata/sysfs or {SYNTHETIC})",
    )
    parser.add_argument("--churn", type=int, default=1000, help="remove/create steps")
    parser.add_argument("--policies", default="static,topology-aware")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--repeat", type=int, default=3, help="timed runs; fastest counts")
    parser.add_argument("--goal-ms", type=float, default=1.0, help="p99 per decision goal")
    parser.add_argument("--plan-pods", type=int, default=2000, help=f"pods for plan on {SYNTHETIC}")
    args = parser.parse_args(argv)

    results: dict[str, Any] = {
        "churn": args.churn,
        "repeat": args.repeat,
        "python": sys.version.split()[0],
        "machines": {},
    }
    status = 0
    table: list[tuple[str, str, int, dict[str, Any]]] = []
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        for spec in args.machines.split(","):
            machine, _, count = spec.partition(":")
            if machine != SYNTHETIC and machine not in SNAPSHOTS:
                parser.error(
                    f"unknown machine {machine!r}: {SYNTHETIC} or one of {sorted(SNAPSHOTS)}"
                )
            containers = int(count or 500)
            topology = load_machine(machine, tmp)
            print(f"{machine}: {topology.describe()}; {containers} live containers, "
                  f"{args.churn} churn steps, seed {args.seed}", flush=True)  # fmt: skip
            per_machine: dict[str, Any] = {"containers": containers, "policies": {}}
            for name in args.policies.split(","):
                run_once(topology, name, 50, 20, args.seed)  # warm-up: imports, caches
                gc.collect()
                runs = [
                    run_once(topology, name, containers, args.churn, args.seed, sweep_every=5)
                    for _ in range(max(1, args.repeat))
                ]
                peak = peak_memory(topology, name, containers, args.churn, args.seed)
                summary = summarize(fastest(runs), peak, runs[0])
                per_machine["policies"][name] = summary
                table.append((machine, name, containers, summary))
                if summary["decision_p99_ms"] > args.goal_ms:
                    status = 1
            if machine == SYNTHETIC and args.plan_pods:
                seconds, code = plan_seconds(tmp / SYNTHETIC, args.plan_pods, args.seed, tmp)
                per_machine["plan"] = {"pods": args.plan_pods, "seconds": round(seconds, 2),
                                       "exit_code": code}  # fmt: skip
            results["machines"][machine] = per_machine
    print(
        f"\n{'machine':22s} {'policy':15s} {'containers':>10s} {'decisions':>9s} {'refused':>7s} "
        f"{'per s':>7s} {'p50 ms':>7s} {'p99 ms':>7s} {'max ms':>7s} {'sweep p50/p99 ms':>17s} "
        f"{'peak MiB':>8s}"
    )
    for machine, name, containers, s in table:
        verdict = "" if s["decision_p99_ms"] <= args.goal_ms else "  OVER GOAL"
        print(
            f"{machine:22s} {name:15s} {containers:10d} {s['decisions']:9d} {s['refused']:7d} "
            f"{s['decisions_per_second']:7d} {s['decision_p50_ms']:7.3f} "
            f"{s['decision_p99_ms']:7.3f} {s['decision_max_ms']:7.2f} "
            f"{s['sweep_p50_ms']:>8} /{s['sweep_p99_ms']:>7} {s['peak_traced_mib']:8}{verdict}"
        )
    print(f"goal: p99 <= {args.goal_ms} ms per decision")
    for machine, figures in results["machines"].items():
        if "plan" in figures:
            p = figures["plan"]
            print(
                f"plan over {p['pods']} pods on {machine}: {p['seconds']} s "
                f"(exit {p['exit_code']}: 0 all placed, 2 some did not fit)"
            )
    results["max_rss_mib"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)
    print(f"process max RSS {results['max_rss_mib']} MiB")
    RESULTS.parent.mkdir(exist_ok=True)
    RESULTS.write_text(json.dumps(results, indent=2) + "\n")
    return status


if __name__ == "__main__":
    sys.exit(main())
