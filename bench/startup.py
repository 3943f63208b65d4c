"""Pod start-up latency on the real single-node cluster: `kubectl apply` to Ready, with no
enforcer, with the CRI relay and with the NRI plugin, in the same run; and the webhook's
admission latency as the API server itself reports it.

    .venv/bin/python -m bench startup [--pods 100] [--bursts 4] [--burst-size 30]
                                      [--modes none,relay,nri] [--rounds 2]

Needs root and the cluster's builds (tests/beds/cluster/build.sh); holds the host's kubepods
cgroups while it runs: run it under the shared lock (`flock /tmp/kre-real.lock ...`). The modes
are interleaved, so that the machine's load drifting over the run falls on all of them alike:
``--rounds`` rounds, each bringing up every mode's cluster in turn (the order rotated from one
round to the next: none, relay, nri; then relay, nri, none; ...) and measuring its share of the
pods there. A cluster of its own comes up in `.cluster-bench/` (tests/support/cluster/, mode
`none` is the node without the webhook and the enforcer), the enforcer's configuration is the
tests' static policy with CPU 0 reserved, and then, after a few warm-up pods that do not count:

- one at a time: ``--pods`` Burstable busybox pods, each `kubectl apply`-ed when the one before
  is Ready (the pods are deleted in batches between two, outside the timing);

after every deletion the node is waited for until it has torn the pods down (their pod cgroups
gone, which kubelet removes once their containers and sandbox are stopped), so the first pod
after a deletion does not wait behind that teardown;
- bursts: ``--bursts`` times ``--burst-size`` pods in one `kubectl apply`, each pod's latency
  counted from that apply.

Ready is seen through one `kubectl get pods --watch`, so every mode pays the same for it. The
webhook's figures are the difference of the API server's
`apiserver_admission_webhook_admission_duration_seconds` histogram over the measured pods
(p50/p99 interpolated in its buckets as `histogram_quantile` does; the mean from its sum).
Prints the modes side by side with ratios to the no-enforcer baseline; writes
bench/results/startup.json. No assertion on any figure: bench/README.md has the run.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

from bench.histogram import EMPTY, Histogram, histogram
from bench.relay import RESULTS, percentile
from tests.support.cluster import workloads as w
from tests.support.cluster.bed import Cluster
from tests.support.cluster.kube import Kubectl
from tests.support.cluster.layout import CGROUP_ROOT, REPO

NS = "bench-startup"
WEBHOOK = "resources.resource-enforcer.dev"
ADMISSION = "apiserver_admission_webhook_admission_duration_seconds"
# One line per event; kubectl's watch output passes through a tab writer, so no tabs.
WATCH_FORMAT = (
    '{.metadata.name}{" node="}{.spec.nodeName}'
    '{" ready="}{.status.conditions[?(@.type=="Ready")].status}{"\\n"}'
)
READY_TIMEOUT = 300.0
TEARDOWN_TIMEOUT = 300.0
POD_CGROUPS = Path("/sys/fs/cgroup/cpuset") / CGROUP_ROOT / "kubepods"


class PodWatch:
    """`kubectl get pods --watch` in the namespace; the monotonic time each pod was first seen
    scheduled and first seen Ready."""

    def __init__(self, kubectl: Kubectl) -> None:
        argv = kubectl.argv("-n", NS, "get", "pods", "--watch", "-o", f"jsonpath={WATCH_FORMAT}")
        self.proc = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True, bufsize=1)
        self.scheduled: dict[str, float] = {}
        self.ready: dict[str, float] = {}
        self.cond = threading.Condition()
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            now = time.monotonic()
            words = line.split()
            if not words:
                continue
            kv = {k: v for k, _, v in (f.partition("=") for f in words[1:])}
            name, node, ready = words[0], kv.get("node", ""), kv.get("ready", "")
            with self.cond:
                if node and name not in self.scheduled:
                    self.scheduled[name] = now
                if ready == "True" and name not in self.ready:
                    self.ready[name] = now
                    self.cond.notify_all()

    def wait_ready(self, names: list[str], timeout: float = READY_TIMEOUT) -> None:
        deadline = time.monotonic() + timeout
        with self.cond:
            while not all(n in self.ready for n in names):
                left = deadline - time.monotonic()
                if left <= 0 or self.proc.poll() is not None:
                    missing = [n for n in names if n not in self.ready]
                    raise RuntimeError(f"not Ready after {timeout:.0f} s: {missing[:5]}")
                self.cond.wait(min(left, 1.0))

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=30)


def pod(name: str) -> dict[str, Any]:
    return w.pod(name, NS, w.container("app", w.burstable("10m", "16Mi")))


def pod_cgroups() -> set[str]:
    """The node's pod cgroups (every QoS class), by name."""
    found: set[str] = set()
    for qos in (POD_CGROUPS, POD_CGROUPS / "burstable", POD_CGROUPS / "besteffort"):
        if qos.is_dir():
            found.update(d.name for d in qos.iterdir() if d.is_dir() and d.name.startswith("pod"))
    return found


def delete_pods(kubectl: Kubectl) -> None:
    """Deletes the bench's pods and waits until the node tore them down: `--wait` returns once
    the API objects are gone, while kubelet and the runtime still stop the sandboxes; that ends
    when kubelet removes the pods' cgroups."""
    uids = {f"pod{p['metadata']['uid']}" for p in kubectl.json("-n", NS, "get", "pods")["items"]}
    kubectl.run("-n", NS, "delete", "pods", "--all", "--wait=true", timeout=600)
    deadline = time.monotonic() + TEARDOWN_TIMEOUT
    while left := uids & pod_cgroups():
        if time.monotonic() > deadline:
            raise RuntimeError(f"{len(left)} deleted pods not torn down after {TEARDOWN_TIMEOUT} s")
        time.sleep(0.2)


def wait_default_service_account(kubectl: Kubectl, timeout: float = 120) -> None:
    """The controller manager makes it shortly after the namespace; pods need it."""
    deadline = time.monotonic() + timeout
    while kubectl.run("-n", NS, "get", "serviceaccount", "default", check=False).returncode:
        if time.monotonic() > deadline:
            raise RuntimeError(f"no default service account in {NS} after {timeout:.0f} s")
        time.sleep(0.5)


def admission(kubectl: Kubectl) -> Histogram:
    text = kubectl.run("get", "--raw=/metrics", timeout=60).stdout
    return histogram(text, ADMISSION, {"name": WEBHOOK, "type": "admit", "operation": "CREATE"})


def one_at_a_time(
    kubectl: Kubectl, watch: PodWatch, count: int, tag: str
) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {"ready": [], "applied": [], "scheduled": []}
    for i in range(count):
        name = f"{tag}-{i}"
        t0 = time.monotonic()
        kubectl.apply(w.dump(pod(name)))
        applied = time.monotonic()
        watch.wait_ready([name])
        out["ready"].append(watch.ready[name] - t0)
        out["applied"].append(applied - t0)
        out["scheduled"].append(watch.scheduled.get(name, watch.ready[name]) - t0)
        if (i + 1) % 25 == 0:
            delete_pods(kubectl)
    delete_pods(kubectl)
    return out


def bursts(
    kubectl: Kubectl, watch: PodWatch, rounds: int, size: int, tag: str
) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {"ready": [], "applied": []}
    for b in range(rounds):
        names = [f"{tag}-{b}-{i}" for i in range(size)]
        t0 = time.monotonic()
        kubectl.apply(w.dump(*(pod(n) for n in names)))
        out["applied"].append(time.monotonic() - t0)
        watch.wait_ready(names)
        out["ready"] += [watch.ready[n] - t0 for n in names]
        delete_pods(kubectl)
    return out


def measure(
    mode: str, root: Path, args: argparse.Namespace, pods: int, rounds: int
) -> dict[str, Any]:
    """One mode's cluster up, `pods` one at a time and `rounds` bursts measured, down."""
    cluster = Cluster(mode, root, baseline=True)
    started = time.monotonic()
    cluster.up()
    try:
        kubectl = cluster.kubectl
        if mode != "none":
            w.configure(kubectl)
        kubectl.apply(w.dump(w.namespace(NS)))
        wait_default_service_account(kubectl)
        watch = PodWatch(kubectl)
        try:
            one_at_a_time(kubectl, watch, args.warmup, "warm")
            before = admission(kubectl)
            single = one_at_a_time(kubectl, watch, pods, "one")
            burst = bursts(kubectl, watch, rounds, args.burst_size, "burst")
            hook = admission(kubectl).minus(before)
        finally:
            watch.stop()
    finally:
        problems = cluster.down()
    if problems:
        raise RuntimeError(f"cluster-down left things behind: {problems}")
    return {
        "one_at_a_time": single,
        "burst": burst,
        "webhook": hook,
        "seconds": time.monotonic() - started,
    }


def merged(parts: list[dict[str, Any]]) -> dict[str, Any]:
    """One mode's rounds as one run: the samples together, the webhook's histograms added."""
    hook = EMPTY
    for part in parts:
        hook = hook.plus(part["webhook"])
    return {
        "one_at_a_time": {
            k: [v for part in parts for v in part["one_at_a_time"][k]]
            for k in ("ready", "applied", "scheduled")
        },
        "burst": {k: [v for part in parts for v in part["burst"][k]] for k in ("ready", "applied")},
        "webhook": {
            "count": hook.count,
            "p50": hook.quantile(0.5),
            "p99": hook.quantile(0.99),
            "mean": hook.mean,
            "buckets": hook.buckets,
        },
        "seconds": sum(part["seconds"] for part in parts),
        "rounds": len(parts),
    }


def shares(total: int, rounds: int) -> list[int]:
    """`total` split over `rounds` as evenly as can be (the first rounds take the rest)."""
    return [total // rounds + (1 if r < total % rounds else 0) for r in range(rounds)]


def order(modes: list[str], round_index: int) -> list[str]:
    """The modes of one round: rotated by one from the round before."""
    k = round_index % len(modes)
    return modes[k:] + modes[:k]


def figures(run: dict[str, Any]) -> dict[str, float]:
    single, burst = run["one_at_a_time"], run["burst"]
    after_apply = [r - a for r, a in zip(single["ready"], single["applied"], strict=True)]
    return {
        "one at a time, p50": percentile(single["ready"], 0.5),
        "one at a time, p99": percentile(single["ready"], 0.99),
        "burst, p50": percentile(burst["ready"], 0.5),
        "burst, p99": percentile(burst["ready"], 0.99),
        "  apply returned, p50": percentile(single["applied"], 0.5),
        "  apply returned, p99": percentile(single["applied"], 0.99),
        "  scheduled seen, p50": percentile(single["scheduled"], 0.5),
        "  then to Ready, p50": percentile(after_apply, 0.5),
        "  then to Ready, p99": percentile(after_apply, 0.99),
        "webhook (API server), p50": run["webhook"]["p50"],
        "webhook (API server), p99": run["webhook"]["p99"],
        "webhook (API server), mean": run["webhook"]["mean"],
    }


def table(runs: dict[str, dict[str, Any]], burst_size: int) -> list[str]:
    modes = list(runs)
    figs = {m: figures(r) for m, r in runs.items()}
    base = "none" if "none" in figs else None
    lines = [f"{'seconds (ratio to none)':30s}" + "".join(f"{m:>20s}" for m in modes)]
    for key in figs[modes[0]]:
        row = f"{key.replace('burst', f'burst of {burst_size}'):30s}"
        for m in modes:
            v = figs[m][key]
            if v != v:  # NaN: no webhook in this mode
                row += f"{'-':>20s}"
                continue
            cell = f"{v:.3f}"
            if base and m != base and not key.startswith("webhook") and figs[base][key] > 0:
                cell += f" ({v / figs[base][key]:.3f})"
            row += f"{cell:>20s}"
        lines.append(row)
    counts = "  ".join(
        f"{m}: {len(r['one_at_a_time']['ready'])} + {len(r['burst']['ready'])} pods, "
        f"{r['webhook']['count']:.0f} reviews, {r['seconds']:.0f} s"
        for m, r in runs.items()
    )
    lines.append(counts)
    return lines


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench startup", description=__doc__)
    parser.add_argument("--pods", type=int, default=100, help="pods one at a time per mode")
    parser.add_argument("--bursts", type=int, default=4, help="bursts per mode")
    parser.add_argument("--burst-size", type=int, default=30, help="pods per burst")
    parser.add_argument("--warmup", type=int, default=3, help="pods not counted, per mode")
    parser.add_argument("--modes", default="none,relay,nri", help="comma-separated, in order")
    parser.add_argument("--rounds", type=int, default=2, help="rounds the modes alternate in")
    parser.add_argument("--dir", type=Path, default=REPO / ".cluster-bench")
    args = parser.parse_args(argv)
    if os.geteuid() != 0:
        print("bench startup needs root (kubelet, containerd, cgroups, the CNI bridge)")
        return 1
    modes = args.modes.split(",")
    rounds = max(1, args.rounds)
    pods, burst_rounds = shares(args.pods, rounds), shares(args.bursts, rounds)
    parts: dict[str, list[dict[str, Any]]] = {m: [] for m in modes}
    for r in range(rounds):
        for mode in order(modes, r):
            print(
                f"-- round {r + 1}/{rounds}, {mode}: cluster up, {pods[r]} pods one at a time, "
                f"{burst_rounds[r]} bursts of {args.burst_size}",
                flush=True,
            )
            parts[mode].append(measure(mode, args.dir, args, pods[r], burst_rounds[r]))
        done = {m: merged(p) for m, p in parts.items() if p}
        print("\n".join(table(done, args.burst_size)), flush=True)
    runs = {m: merged(p) for m, p in parts.items()}
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "startup.json").write_text(
        json.dumps({"figures": {m: figures(r) for m, r in runs.items()}, "runs": runs}, indent=1)
    )
    return 0
