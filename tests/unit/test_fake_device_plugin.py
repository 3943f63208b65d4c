"""The tests' device plugin (tests/support/fake_device_plugin.py) as kubelet's device manager
sees it, over real gRPC on unix sockets: it registers with version v1beta1 and its endpoint
and resource name, lists its devices healthy with their NUMA node, and answers Allocate."""

from __future__ import annotations

import argparse
import threading
from concurrent import futures
from pathlib import Path
from typing import Any

import grpc
import pytest

from tests.support.devicepluginapi import deviceplugin_pb2 as pb
from tests.support.devicepluginapi import deviceplugin_pb2_grpc as pb_grpc
from tests.support.fake_device_plugin import FakeDevicePlugin, parse_resource


class _Kubelet(pb_grpc.RegistrationServicer):
    def __init__(self) -> None:
        self.registered: list[Any] = []
        self.got = threading.Event()

    def Register(self, request: Any, context: Any) -> Any:
        self.registered.append(request)
        self.got.set()
        return pb.Empty()


def test_registers_lists_and_allocates(tmp_path: Path) -> None:
    folder = tmp_path / "device-plugins"
    folder.mkdir()
    kubelet = _Kubelet()
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    pb_grpc.add_RegistrationServicer_to_server(kubelet, server)
    server.add_insecure_port(f"unix://{folder / 'kubelet.sock'}")
    server.start()
    plugin = FakeDevicePlugin(folder, "example.com/fake-nic", [("nic-0", 0), ("nic-1", 1)])
    try:
        plugin.start()
        assert kubelet.got.wait(30)
        (reg,) = kubelet.registered
        assert (reg.version, reg.resource_name) == ("v1beta1", "example.com/fake-nic")
        with grpc.insecure_channel(f"unix://{folder / reg.endpoint}") as channel:
            stub = pb_grpc.DevicePluginStub(channel)
            options = stub.GetDevicePluginOptions(pb.Empty(), timeout=30)
            assert not options.pre_start_required
            first = next(iter(stub.ListAndWatch(pb.Empty(), timeout=30)))
            assert [(d.ID, d.health, [n.ID for n in d.topology.nodes]) for d in first.devices] == [
                ("nic-0", "Healthy", [0]),
                ("nic-1", "Healthy", [1]),
            ]
            answer = stub.Allocate(
                pb.AllocateRequest(
                    container_requests=[pb.ContainerAllocateRequest(devices_ids=["nic-1"])]
                ),
                timeout=30,
            )
            assert answer.container_responses[0].envs["FAKE_DEVICES"] == "nic-1"
    finally:
        plugin.stop()
        server.stop(grace=None)
    assert not (folder / plugin.endpoint).exists()


def test_resource_argument() -> None:
    assert parse_resource("example.com/far-nic=far-0:7,far-1:3") == (
        "example.com/far-nic",
        [("far-0", 7), ("far-1", 3)],
    )
    for bad in ("example.com/x", "example.com/x=a", "=a:1", "example.com/x=a:b"):
        with pytest.raises(argparse.ArgumentTypeError, match="NAME=ID:NODE"):
            parse_resource(bad)
