"""Micro benchmark: CRI Version straight to containerd vs through the HTTP/2 relay.

    .venv/bin/python bench/relay_transport.py --socket /run/containerd/containerd.sock
    .venv/bin/python bench/relay_transport.py          # starts a private containerd (root)

The relay runs in its own process (as the enforcer does), routing everything to ``--socket``.
Direct and relayed calls are measured in the same run, in alternating rounds so that machine
noise hits both alike, with 1 and with 8 concurrent clients (threads sharing one channel, as
kubelet shares one connection). Prints p50/p99 per case and the relay/direct ratio.
``--profile FILE`` writes a cProfile of the relay process.
"""

from __future__ import annotations

import argparse
import contextlib
import multiprocessing
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

import grpc

VERSION = "/runtime.v1.RuntimeService/Version"
VERSION_REQUEST = b"\x0a\x02v1"  # VersionRequest{version: "v1"}


def _run_relay(relay_socket: str, upstream: str, profile: str | None) -> None:
    import asyncio
    import signal

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    from enforcer.relay.h2 import serve_relay

    async def main() -> None:
        server = await serve_relay(relay_socket, lambda _path: upstream, {})
        stop = asyncio.Event()
        asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
        await stop.wait()
        await server.close(grace=1.0)

    if profile:
        import cProfile

        cProfile.runctx("asyncio.run(main())", globals(), locals(), profile)
    else:
        asyncio.run(main())


def _wait_for_socket(path: str, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not os.path.exists(path):
        if time.monotonic() > deadline:
            raise SystemExit(f"relay did not come up on {path}")
        time.sleep(0.01)


def _timed_calls(stub: grpc.UnaryUnaryMultiCallable, n: int, out: list[float]) -> None:
    clock = time.perf_counter_ns
    for _ in range(n):
        t0 = clock()
        stub(VERSION_REQUEST, timeout=10)
        out.append((clock() - t0) / 1000.0)


def _round(stub: grpc.UnaryUnaryMultiCallable, clients: int, calls: int) -> list[float]:
    """``calls`` calls spread over ``clients`` threads; latencies in µs."""
    per = max(1, calls // clients)
    results: list[list[float]] = [[] for _ in range(clients)]
    if clients == 1:
        _timed_calls(stub, per, results[0])
    else:
        threads = [
            threading.Thread(target=_timed_calls, args=(stub, per, results[i]))
            for i in range(clients)
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    return [x for r in results for x in r]


def _pct(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--socket", help="containerd's socket (default: start a private containerd)"
    )
    parser.add_argument("--calls", type=int, default=4000, help="calls per case")
    parser.add_argument("--rounds", type=int, default=8, help="alternating rounds per case")
    parser.add_argument("--clients", default="1,8")
    parser.add_argument("--profile", help="write a cProfile of the relay process here")
    args = parser.parse_args()
    with contextlib.ExitStack() as stack:
        if args.socket is None:
            from tests.support.containerd import PrivateContainerd

            args.socket = stack.enter_context(PrivateContainerd(import_images=False)).socket
        return _bench(args)


def _bench(args: argparse.Namespace) -> int:
    workdir = tempfile.mkdtemp(prefix="relay-bench-")
    relay_socket = os.path.join(workdir, "relay.sock")
    ctx = multiprocessing.get_context("spawn")
    relay = ctx.Process(target=_run_relay, args=(relay_socket, args.socket, args.profile))
    relay.start()
    try:
        _wait_for_socket(relay_socket)
        channels = {
            "direct": grpc.insecure_channel(f"unix:{args.socket}"),
            "relay": grpc.insecure_channel(f"unix:{relay_socket}"),
        }
        stubs = {k: ch.unary_unary(VERSION) for k, ch in channels.items()}
        for stub in stubs.values():  # connect and warm up
            _round(stub, 1, 300)
        print(f"containerd: {args.socket}   calls per case: {args.calls}   rounds: {args.rounds}")
        print(f"{'clients':>7} {'path':>7} {'p50 µs':>9} {'p99 µs':>9} {'mean µs':>9}")
        for clients in (int(c) for c in args.clients.split(",")):
            samples: dict[str, list[float]] = {"direct": [], "relay": []}
            for _ in range(args.rounds):
                for name, stub in stubs.items():
                    samples[name] += _round(stub, clients, args.calls // args.rounds)
            for name, values in samples.items():
                print(
                    f"{clients:>7} {name:>7} {_pct(values, 0.5):>9.0f} {_pct(values, 0.99):>9.0f}"
                    f" {statistics.fmean(values):>9.0f}"
                )
            ratio50 = _pct(samples["relay"], 0.5) / _pct(samples["direct"], 0.5)
            ratio99 = _pct(samples["relay"], 0.99) / _pct(samples["direct"], 0.99)
            print(f"{clients:>7} {'ratio':>7} {ratio50:>9.2f} {ratio99:>9.2f}   (relay / direct)")
        for ch in channels.values():
            ch.close()
    finally:
        relay.terminate()
        relay.join(10)
        shutil.rmtree(workdir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
