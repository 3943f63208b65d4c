"""Benchmarks, run by name: `python -m bench NAME [options]` (`make bench` runs them all).

A benchmark is a module with `main(argv) -> int`; add it to BENCHMARKS to register it.
Results are printed and written to bench/results/NAME.json (not committed); the figures that
matter are recorded by hand in bench/README.md with the command that produced them.
"""

from __future__ import annotations

import importlib
from collections.abc import Sequence

BENCHMARKS: dict[str, tuple[str, str]] = {
    # name: (module, one-line description)
    "webhook": (
        "bench.webhook",
        "admission webhook vs a bare ASGI app over the same TLS: throughput, p50/p99",
    ),
    "relay": (
        "bench.relay",
        "the enforcer's relay vs direct calls to the same containerd: p50/p99, create cycles",
    ),
    "nri": (
        "bench.nri",
        "CreateContainer with the NRI plugin vs containerd 1.7 with NRI and no plugin: p50/p99",
    ),
    "policy": (
        "bench.policy",
        "static and topology-aware decisions with 500 containers on 144 CPUs: rate, p99, memory",
    ),
}


def run(name: str, argv: Sequence[str] = ()) -> int:
    module_name, _ = BENCHMARKS[name]
    module = importlib.import_module(module_name)
    return int(module.main(list(argv)))
