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
        "admission webhook vs a Go net/http baseline and a bare ASGI app, same TLS: req/s, CPU",
    ),
    "relay": (
        "bench.relay",
        "the relay vs direct containerd and a grpc-go proxy, Go client: p50/p99, CPU, creates",
    ),
    "nri": (
        "bench.nri",
        "CreateContainer with our NRI plugin vs a Go stub plugin vs none, containerd 2.4: p50/p99",
    ),
    "critest": (
        "bench.critest",
        "critest -benchmark through the relay vs direct, same containerd: p50/p99 per operation",
    ),
    "startup": (
        "bench.startup",
        "pod start-up (apply to Ready) on the real cluster: no enforcer, relay, NRI; webhook",
    ),
    "policy": (
        "bench.policy",
        "static and topology-aware decisions, 144 CPUs/500 and 768 CPUs/2000 containers; plan",
    ),
}


def run(name: str, argv: Sequence[str] = ()) -> int:
    module_name, _ = BENCHMARKS[name]
    module = importlib.import_module(module_name)
    return int(module.main(list(argv)))
