"""`critest -benchmark` (cri-tools v1.37.0) against a runtime directly and through the relay,
same run, same runtime: per operation, the median and p99 of each side and their ratio.

    .venv/bin/python -m bench critest [--runtime containerd2.4] [--rounds 2] [--containers 20]

Sets up tests.support.critest_bed.CritestBed (a loopback registry with critest's images, a
private containerd of the matrix, `resource-enforcer run` in front of it with the static
policy), then runs critest's benchmark specs (pod, container, image lifecycles and image
listing) in alternating rounds, direct then relay (machine noise hits both alike). critest
writes each benchmark's per-sample operation durations as JSON; this prints, per operation,
p50 and p99 of each side and relay/direct; writes bench/results/critest.json.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

from bench.relay import RESULTS, percentile
from tests.support.critest import run_critest
from tests.support.critest_bed import CritestBed

_E2E = "registry.k8s.io/e2e-test-images/"


def _samples(folder: Path) -> dict[str, list[float]]:
    """critest's benchmark JSON files in ``folder`` -> "benchmark/operation" -> seconds."""
    out: dict[str, list[float]] = {}
    for path in sorted(folder.glob("*_data.json")):
        data = json.loads(path.read_text())
        bench = path.name.removesuffix("_data.json").removesuffix("_benchmark")
        names = data.get("operationsNames") or []
        for point in data.get("datapoints") or []:
            for name, ns in zip(names, point.get("operationsDurationsNs") or [], strict=False):
                out.setdefault(f"{bench}/{name}", []).append(ns / 1e9)
    return out


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench critest", description=__doc__)
    parser.add_argument("--runtime", default="containerd2.4", help="a release of the matrix")
    parser.add_argument("--rounds", type=int, default=2, help="alternating rounds per side")
    parser.add_argument("--containers", type=int, default=20, help="lifecycles per benchmark")
    args = parser.parse_args(argv)
    samples: dict[str, dict[str, list[float]]] = {"direct": {}, "relay": {}}
    with tempfile.TemporaryDirectory(prefix="kre-bench-critest-") as tmp:
        bed = CritestBed(args.runtime, Path(tmp, "bed"))
        reason = bed.unavailable()
        if reason:
            print(f"needs {args.runtime}, a loopback registry and critest: {reason}")
            return 1
        params = Path(tmp, "params.yaml")
        n = args.containers
        params.write_text(
            f"containersNumber: {n}\ncontainersNumberParallel: 1\n"
            "containerBenchmarkTimeoutSeconds: 600\n"
            f"podsNumber: {n}\npodsNumberParallel: 1\npodBenchmarkTimeoutSeconds: 600\n"
            f"imagesNumber: {max(2, n // 4)}\nimagesNumberParallel: 1\n"
            "imageBenchmarkTimeoutSeconds: 600\n"
            "podContainerStartBenchmarkTimeoutSeconds: 600\n"
            # critest's defaults are on public.ecr.aws; the loopback registry serves these.
            f"imagePullingBenchmarkImage: {_E2E}busybox:1.29-2\n"
            f"imageListingBenchmarkImages: [{_E2E}busybox:1.29-2, {_E2E}nginx:1.14-2]\n"
        )
        with bed:
            for round_ in range(args.rounds):
                for side, socket in (("direct", bed.direct), ("relay", bed.relay)):
                    out = Path(tmp, f"{side}-{round_}")
                    data = out / "data"
                    data.mkdir(parents=True)
                    done = run_critest(
                        socket,
                        out,
                        extra=(
                            "-benchmark",
                            f"--benchmarking-params-file={params}",
                            f"--benchmarking-output-dir={data}",
                        ),
                    )
                    if done.failed:
                        print(f"{side}: benchmark specs failed: {sorted(done.failed)}")
                        print(done.output[-2000:])
                        return 1
                    for op, values in _samples(data).items():
                        samples[side].setdefault(op, []).extend(values)
    results: dict[str, dict[str, float]] = {}
    print(f"critest -benchmark on {args.runtime}, {args.rounds} rounds, ms (relay/direct)")
    print(f"{'operation':42s} {'direct p50':>10s} {'relay p50':>10s} {'ratio':>6s} "
          f"{'direct p99':>10s} {'relay p99':>10s} {'ratio':>6s}")  # fmt: skip
    for op in sorted(samples["direct"]):
        d, r = samples["direct"][op], samples["relay"].get(op, [])
        if not r:
            continue
        row = {
            f"{side}_{stat}_ms": round(percentile(s, q) * 1e3, 3)
            for side, s in (("direct", d), ("relay", r))
            for stat, q in (("p50", 0.5), ("p99", 0.99))
        }
        row["ratio_p50"] = round(row["relay_p50_ms"] / max(row["direct_p50_ms"], 1e-9), 2)
        row["ratio_p99"] = round(row["relay_p99_ms"] / max(row["direct_p99_ms"], 1e-9), 2)
        row["samples"] = min(len(d), len(r))
        results[op] = row
        print(
            f"{op:42s} {row['direct_p50_ms']:10.2f} {row['relay_p50_ms']:10.2f} "
            f"{row['ratio_p50']:6.2f} {row['direct_p99_ms']:10.2f} {row['relay_p99_ms']:10.2f} "
            f"{row['ratio_p99']:6.2f}"
        )
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "critest.json").write_text(
        json.dumps(
            {"runtime": args.runtime, "rounds": args.rounds, "operations": results}, indent=2
        )
    )
    return 0
