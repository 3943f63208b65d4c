"""Fixtures for the relay tests (the test doubles live in relay_harness.py)."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable, Iterator, Mapping

import grpc
import pytest
from h2peer import Peer
from relay_harness import GRPC_OPTIONS, FakeUpstream, RelayThread

from enforcer.relay.h2 import Interceptor, TapFactory


@pytest.fixture
def workdir() -> Iterator[str]:
    # Short: unix socket paths are limited to 108 bytes, pytest's tmp_path can be longer.
    path = tempfile.mkdtemp(prefix="rl-", dir="/tmp")
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def upstream(workdir: str) -> Iterator[FakeUpstream]:
    up = FakeUpstream(os.path.join(workdir, "up.sock")).start()
    yield up
    up.stop()


@pytest.fixture
def relay_factory(workdir: str) -> Iterator[Callable[..., RelayThread]]:
    relays: list[RelayThread] = []

    def make(
        route: Callable[[str], str],
        intercepts: Mapping[str, Interceptor] | None = None,
        name: str = "relay.sock",
        taps: Mapping[str, TapFactory] | None = None,
    ) -> RelayThread:
        relay = RelayThread(os.path.join(workdir, name), route, intercepts, taps)
        relays.append(relay)
        return relay

    yield make
    for relay in relays:
        relay.close()


@pytest.fixture
def relay(relay_factory: Callable[..., RelayThread], upstream: FakeUpstream) -> RelayThread:
    return relay_factory(lambda _path: upstream.path)


@pytest.fixture
def channel_factory() -> Iterator[Callable[[str], grpc.Channel]]:
    channels: list[grpc.Channel] = []

    def make(socket_path: str) -> grpc.Channel:
        ch = grpc.insecure_channel(f"unix:{socket_path}", options=GRPC_OPTIONS)
        channels.append(ch)
        return ch

    yield make
    for ch in channels:
        ch.close()


@pytest.fixture
def channel(relay: RelayThread, channel_factory: Callable[[str], grpc.Channel]) -> grpc.Channel:
    return channel_factory(relay.socket_path)


@pytest.fixture
def client(relay: RelayThread) -> Iterator[Callable[..., Peer]]:
    """Makes raw HTTP/2 client peers of the relay (closed at the end of the test)."""
    peers: list[Peer] = []

    def make(settings: dict[int, int] | None = None) -> Peer:
        peer = Peer.client(relay.socket_path, settings)
        peers.append(peer)
        return peer

    yield make
    for p in peers:
        p.close()
