"""The HTTP/2 relay in front of a real containerd: answers are the same as direct."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import grpc
import pytest
from relay_harness import RelayThread

from enforcer.cri import api_pb2
from tests.support.containerd import PrivateContainerd

pytestmark = pytest.mark.containerd

RUNTIME = "/runtime.v1.RuntimeService/"
IMAGE = "/runtime.v1.ImageService/"


@pytest.fixture
def ctrd_relay(
    containerd: PrivateContainerd, relay_factory: Callable[..., RelayThread]
) -> RelayThread:
    # This containerd serves both CRI services on one socket.
    return relay_factory(lambda _path: containerd.socket)


def invoke(channel: grpc.Channel, path: str, request: bytes) -> bytes | tuple[str, str]:
    try:
        return channel.unary_unary(path)(request, timeout=10)
    except grpc.RpcError as err:
        return (str(err.code()), err.details())


@pytest.mark.parametrize(
    ("path", "request_message", "response_type"),
    [
        (RUNTIME + "Version", api_pb2.VersionRequest(version="v1"), api_pb2.VersionResponse),
        (IMAGE + "ListImages", api_pb2.ListImagesRequest(), api_pb2.ListImagesResponse),
        (
            RUNTIME + "ListContainers",
            api_pb2.ListContainersRequest(),
            api_pb2.ListContainersResponse,
        ),
        (
            RUNTIME + "ListPodSandbox",
            api_pb2.ListPodSandboxRequest(),
            api_pb2.ListPodSandboxResponse,
        ),
    ],
    ids=["Version", "ListImages", "ListContainers", "ListPodSandbox"],
)
def test_same_answers_as_direct(
    containerd: PrivateContainerd,
    ctrd_relay: RelayThread,
    channel_factory: Callable[[str], grpc.Channel],
    path: str,
    request_message: Any,
    response_type: Any,
) -> None:
    request = request_message.SerializeToString()
    direct = invoke(channel_factory(containerd.socket), path, request)
    relayed = invoke(channel_factory(ctrd_relay.socket_path), path, request)
    assert isinstance(direct, bytes), direct
    assert isinstance(relayed, bytes), relayed
    assert canonical(response_type.FromString(relayed)) == canonical(
        response_type.FromString(direct)
    )


def canonical(message: Any) -> list[tuple[str, Any]]:
    """A response's fields with repeated ones sorted: containerd lists in map order."""
    out: list[tuple[str, Any]] = []
    for fd, value in message.ListFields():
        if fd.is_repeated:
            value = sorted(v.SerializeToString(deterministic=True) for v in value)
        out.append((fd.name, value))
    return out


def test_version_is_containerds(
    ctrd_relay: RelayThread, channel_factory: Callable[[str], grpc.Channel]
) -> None:
    raw = channel_factory(ctrd_relay.socket_path).unary_unary(RUNTIME + "Version")(
        api_pb2.VersionRequest(version="v1").SerializeToString(), timeout=10
    )
    version = api_pb2.VersionResponse.FromString(raw)
    assert version.runtime_name == "containerd"
    assert version.runtime_api_version == "v1"


def test_images_are_listed(
    ctrd_relay: RelayThread, channel_factory: Callable[[str], grpc.Channel]
) -> None:
    raw = channel_factory(ctrd_relay.socket_path).unary_unary(IMAGE + "ListImages")(
        api_pb2.ListImagesRequest().SerializeToString(), timeout=10
    )
    assert api_pb2.ListImagesResponse.FromString(raw).images  # the helper imports pause/busybox


def test_unknown_method_is_containerds_unimplemented(
    containerd: PrivateContainerd,
    ctrd_relay: RelayThread,
    channel_factory: Callable[[str], grpc.Channel],
) -> None:
    path = RUNTIME + "NoSuchMethod"
    direct = invoke(channel_factory(containerd.socket), path, b"")
    relayed = invoke(channel_factory(ctrd_relay.socket_path), path, b"")
    assert direct == relayed
    assert relayed[0] == str(grpc.StatusCode.UNIMPLEMENTED)


def test_containerd_restarted_under_the_relay(
    containerd: PrivateContainerd,
    ctrd_relay: RelayThread,
    channel_factory: Callable[[str], grpc.Channel],
) -> None:
    stub = channel_factory(ctrd_relay.socket_path).unary_unary(RUNTIME + "Version")
    request = api_pb2.VersionRequest(version="v1").SerializeToString()
    assert stub(request, timeout=10)
    containerd.restart()
    deadline = time.monotonic() + 20
    while True:
        start = time.monotonic()
        try:
            assert stub(request, timeout=10)
            break
        except grpc.RpcError as err:
            # Between the restart and the relay's reconnect: UNAVAILABLE, and at once.
            assert err.code() == grpc.StatusCode.UNAVAILABLE, err
            assert containerd.socket in err.details()
            assert time.monotonic() - start < 2.0
            assert time.monotonic() < deadline, "the relay never reconnected"
            time.sleep(0.05)
    for _ in range(5):
        assert stub(request, timeout=10)
