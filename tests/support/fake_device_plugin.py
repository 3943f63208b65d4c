"""A test-only device plugin speaking kubelet's device-plugin API v1beta1: fake devices with a
NUMA node, so that policy.preferCloseToDevices can be tried on the real node. Never in the
wheel; its generated code is `tests/support/devicepluginapi` (tools/generate_podresources.py).

For each `--resource NAME=ID:NODE[,ID:NODE...]` it serves a DevicePlugin on
`PLUGIN_DIR/<resource>.sock` (GetDevicePluginOptions: no pre-start, no preferred
allocation; ListAndWatch: the devices, healthy, each with a TopologyInfo naming its NUMA node,
then nothing until it stops; Allocate: one environment variable per device, no device node to
mount), then registers it with kubelet through `PLUGIN_DIR/kubelet.sock`. It serves until
SIGTERM or SIGINT. PLUGIN_DIR is kubelet's `/var/lib/kubelet/device-plugins/` whatever its
`--root-dir` (the device manager's path is fixed: the test node's kubelet, with a root dir of
its own, still serves registration there), unless `--plugin-dir` says otherwise.

    python -m tests.support.fake_device_plugin \\
        --resource example.com/fake-nic=nic-0:0 --resource example.com/far-nic=far-0:7
"""

from __future__ import annotations

import argparse
import logging
import signal
import threading
from collections.abc import Iterator, Sequence
from concurrent import futures
from pathlib import Path
from typing import Any

import grpc

from tests.support.devicepluginapi import deviceplugin_pb2 as pb
from tests.support.devicepluginapi import deviceplugin_pb2_grpc as pb_grpc

VERSION = "v1beta1"
PLUGIN_DIR = Path("/var/lib/kubelet/device-plugins")  # kubelet's DevicePluginPath
log = logging.getLogger("fake-device-plugin")


def parse_resource(text: str) -> tuple[str, list[tuple[str, int]]]:
    """`NAME=ID:NODE[,ID:NODE...]` -> (NAME, [(ID, NODE), ...])."""
    name, sep, rest = text.partition("=")
    try:
        devices = [(i, int(n)) for i, _, n in (d.rpartition(":") for d in rest.split(","))]
    except ValueError:
        devices = []
    if not sep or not name or not devices or any(not i for i, _ in devices):
        raise argparse.ArgumentTypeError(f"--resource {text!r}: expected NAME=ID:NODE[,ID:NODE]")
    return name, devices


class FakeDevicePlugin(pb_grpc.DevicePluginServicer):
    def __init__(self, folder: Path, resource: str, devices: list[tuple[str, int]]) -> None:
        self.folder = folder
        self.resource = resource
        self.devices = devices
        self.endpoint = resource.replace("/", "_") + ".sock"
        self.stopping = threading.Event()
        self.server: Any = None

    def GetDevicePluginOptions(self, request: Any, context: Any) -> Any:
        return pb.DevicePluginOptions()

    def ListAndWatch(self, request: Any, context: Any) -> Iterator[Any]:
        yield pb.ListAndWatchResponse(
            devices=[
                pb.Device(
                    ID=i,
                    health="Healthy",
                    topology=pb.TopologyInfo(nodes=[pb.NUMANode(ID=node)]),
                )
                for i, node in self.devices
            ]
        )
        while not self.stopping.wait(1) and context.is_active():
            pass

    def Allocate(self, request: Any, context: Any) -> Any:
        log.info(
            "%s: allocate %s",
            self.resource,
            [list(c.devices_ids) for c in request.container_requests],
        )
        return pb.AllocateResponse(
            container_responses=[
                pb.ContainerAllocateResponse(envs={"FAKE_DEVICES": ",".join(c.devices_ids)})
                for c in request.container_requests
            ]
        )

    def PreStartContainer(self, request: Any, context: Any) -> Any:
        return pb.PreStartContainerResponse()

    def start(self) -> None:
        socket = self.folder / self.endpoint
        socket.unlink(missing_ok=True)
        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        pb_grpc.add_DevicePluginServicer_to_server(self, self.server)
        self.server.add_insecure_port(f"unix://{socket}")
        self.server.start()
        with grpc.insecure_channel(f"unix://{self.folder / 'kubelet.sock'}") as channel:
            pb_grpc.RegistrationStub(channel).Register(
                pb.RegisterRequest(
                    version=VERSION,
                    endpoint=self.endpoint,
                    resource_name=self.resource,
                    options=pb.DevicePluginOptions(),
                ),
                timeout=30,
            )
        log.info("registered %s: %s", self.resource, self.devices)

    def stop(self) -> None:
        self.stopping.set()
        if self.server is not None:
            self.server.stop(grace=None)
        (self.folder / self.endpoint).unlink(missing_ok=True)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="fake_device_plugin")
    parser.add_argument("--plugin-dir", type=Path, default=PLUGIN_DIR)
    parser.add_argument("--resource", type=parse_resource, action="append", required=True)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    folder = args.plugin_dir
    plugins = [FakeDevicePlugin(folder, name, devices) for name, devices in args.resource]
    for plugin in plugins:
        plugin.start()
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    stop.wait()
    for plugin in plugins:
        plugin.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
