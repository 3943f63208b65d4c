"""A test-only DRA driver, `gpu.example.com`: fake GPUs with a NUMA node and a PCIe root, so a
claim can align our CPUs with a device of another driver (docs/dra.md). Never in the wheel.

It does what a real driver does, with the project's generated gRPC code (`enforcer.draapi`):

- registers with kubelet through `KUBELET_DIR/plugins_registry/gpu.example.com-reg.sock`
  (Registration: type `DRAPlugin`, versions `v1.DRAPlugin`) and serves the DRA kubelet plugin
  API on `KUBELET_DIR/plugins/gpu.example.com/dra.sock`;
- NodePrepareResources answers each claim with its allocated devices of this driver (read from
  the API server; nothing is set up on the node: no CDI device, a no-op); NodeUnprepareResources
  answers with no error;
- publishes one ResourceSlice (pool = the node's name) and the DeviceClass `gpu.example.com`,
  and deletes the slice when it stops (SIGTERM, SIGINT).

    python -m tests.support.fake_gpu_driver --kubelet-dir DIR --node NAME --kubeconfig FILE \\
        --gpu 0:pci0000:00 --gpu 1:pci0000:80      # NUMA node:PCIe root, one per GPU
"""

from __future__ import annotations

import argparse
import logging
import signal
import threading
from collections.abc import Mapping, Sequence
from concurrent import futures
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc

from enforcer.draapi import dra_pb2, dra_pb2_grpc, registration_pb2, registration_pb2_grpc

DRIVER = "gpu.example.com"
STD = "resource.kubernetes.io"
log = logging.getLogger("fake-gpu-driver")


@dataclass(frozen=True)
class FakeGPU:
    index: int
    numa_node: int
    pcie_root: str  # pci<domain>:<bus>, as the standard attribute is written

    @property
    def name(self) -> str:
        return f"gpu-{self.index}"


def parse_gpu(index: int, text: str) -> FakeGPU:
    node, _, root = text.partition(":")
    if not node.isdigit() or not root.startswith("pci"):
        raise argparse.ArgumentTypeError(f"--gpu {text!r}: expected NUMA:pciDDDD:BB")
    return FakeGPU(index, int(node), root)


def resource_slice(node: str, gpus: Sequence[FakeGPU]) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": f"{node}-{DRIVER}"},
        "spec": {
            "driver": DRIVER,
            "nodeName": node,
            "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
            "devices": [
                {
                    "name": g.name,
                    "attributes": {
                        f"{STD}/numaNode": {"int": g.numa_node},
                        f"{STD}/pcieRoot": {"string": g.pcie_root},
                        "index": {"int": g.index},
                    },
                }
                for g in gpus
            ],
        },
    }


DEVICE_CLASS = {
    "apiVersion": "resource.k8s.io/v1",
    "kind": "DeviceClass",
    "metadata": {"name": DRIVER},
    "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{DRIVER}"'}}]},
}


def our_devices(claim: Mapping[str, Any], node: str) -> list[dra_pb2.Device]:
    """The claim's allocated devices of this driver and pool, as kubelet wants them back."""
    results = (((claim.get("status") or {}).get("allocation") or {}).get("devices") or {}).get(
        "results"
    ) or []
    return [
        dra_pb2.Device(request_names=[r["request"]], pool_name=r["pool"], device_name=r["device"])
        for r in results
        if r.get("driver") == DRIVER and r.get("pool") == node
    ]


class _Plugin(dra_pb2_grpc.DRAPluginServicer):  # type: ignore[misc]
    def __init__(self, node: str, claims: Any) -> None:
        self.node = node
        self.claims = claims  # (namespace, name) -> the claim as the API server returns it
        self.prepared: set[str] = set()

    def NodePrepareResources(self, request: Any, context: Any) -> Any:
        out = dra_pb2.NodePrepareResourcesResponse()
        for c in request.claims:
            try:
                devices = our_devices(self.claims(c.namespace, c.name), self.node)
                out.claims[c.uid].devices.extend(devices)
                self.prepared.add(c.uid)
                log.info("prepared claim %s/%s: %s", c.namespace, c.name, len(devices))
            except Exception as exc:  # a per-claim failure goes in the answer, as kubelet expects
                out.claims[c.uid].error = f"claim {c.namespace}/{c.name}: {exc}"
        return out

    def NodeUnprepareResources(self, request: Any, context: Any) -> Any:
        out = dra_pb2.NodeUnprepareResourcesResponse()
        for c in request.claims:
            self.prepared.discard(c.uid)
            out.claims[c.uid].error = ""
        return out


class _Registration(registration_pb2_grpc.RegistrationServicer):  # type: ignore[misc]
    def __init__(self, endpoint: Path) -> None:
        self.endpoint = endpoint
        self.registered = threading.Event()

    def GetInfo(self, request: Any, context: Any) -> Any:
        return registration_pb2.PluginInfo(
            type="DRAPlugin",
            name=DRIVER,
            endpoint=str(self.endpoint),
            supported_versions=["v1.DRAPlugin"],
        )

    def NotifyRegistrationStatus(self, request: Any, context: Any) -> Any:
        if request.plugin_registered:
            self.registered.set()
        else:
            log.error("kubelet refused the registration: %s", request.error)
        return registration_pb2.RegistrationStatusResponse()


class FakeGPUDriver:
    """The two gRPC servers; `claims(namespace, name)` reads a ResourceClaim."""

    def __init__(self, kubelet_dir: Path, node: str, claims: Any) -> None:
        self.plugin_dir = kubelet_dir / "plugins" / DRIVER
        self.endpoint = self.plugin_dir / "dra.sock"
        self.registration_socket = kubelet_dir / "plugins_registry" / f"{DRIVER}-reg.sock"
        self.plugin = _Plugin(node, claims)
        self.registration = _Registration(self.endpoint)
        self._servers: list[grpc.Server] = []

    def start(self) -> None:
        self.plugin_dir.mkdir(parents=True, exist_ok=True)
        self.registration_socket.parent.mkdir(parents=True, exist_ok=True)
        for path in (self.endpoint, self.registration_socket):
            path.unlink(missing_ok=True)
        plugin = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
        dra_pb2_grpc.add_DRAPluginServicer_to_server(self.plugin, plugin)
        plugin.add_insecure_port(f"unix://{self.endpoint}")
        plugin.start()
        # Registration last: kubelet connects to the endpoint as soon as it learns of it.
        registration = grpc.server(futures.ThreadPoolExecutor(max_workers=1))
        registration_pb2_grpc.add_RegistrationServicer_to_server(self.registration, registration)
        registration.add_insecure_port(f"unix://{self.registration_socket}")
        registration.start()
        self._servers = [registration, plugin]

    def stop(self) -> None:
        for server in self._servers:
            server.stop(grace=2).wait()
        for path in (self.registration_socket, self.endpoint):
            path.unlink(missing_ok=True)


def main(argv: Sequence[str] | None = None) -> int:
    from kubernetes import client, config  # the cluster's API: only the running driver needs it

    parser = argparse.ArgumentParser(prog="fake_gpu_driver")
    parser.add_argument("--kubelet-dir", type=Path, required=True)
    parser.add_argument("--node", required=True)
    parser.add_argument("--kubeconfig", required=True)
    parser.add_argument("--gpu", action="append", default=[], help="NUMA:pciDDDD:BB")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    gpus = [parse_gpu(i, text) for i, text in enumerate(args.gpu)]
    api = client.CustomObjectsApi(config.new_client_from_config(config_file=args.kubeconfig))

    def claims(namespace: str, name: str) -> Mapping[str, Any]:
        return api.get_namespaced_custom_object(  # type: ignore[no-any-return]
            "resource.k8s.io", "v1", namespace, "resourceclaims", name
        )

    def apply(body: dict[str, Any], plural: str) -> None:
        try:
            api.delete_cluster_custom_object(
                "resource.k8s.io", "v1", plural, body["metadata"]["name"]
            )
        except client.ApiException as exc:
            if exc.status != 404:
                raise
        api.create_cluster_custom_object("resource.k8s.io", "v1", plural, body)

    apply(DEVICE_CLASS, "deviceclasses")
    slice_ = resource_slice(args.node, gpus)
    apply(slice_, "resourceslices")
    driver = FakeGPUDriver(args.kubelet_dir, args.node, claims)
    driver.start()
    log.info("serving %s with %d GPUs on %s", DRIVER, len(gpus), driver.endpoint)
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    stop.wait()
    driver.stop()
    try:
        api.delete_cluster_custom_object(
            "resource.k8s.io", "v1", "resourceslices", slice_["metadata"]["name"]
        )
    except client.ApiException as exc:
        log.warning("could not delete the slice: %s", exc.reason)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
