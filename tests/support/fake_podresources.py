"""kubelet's pod-resources API (v1) as a test double: a real gRPC server on a unix socket,
speaking the generated messages, answering for the pods a test gives it (or, on demand, not
answering in time, or without Get as a kubelet with KubeletPodResourcesGet off)."""

from __future__ import annotations

import threading
from concurrent import futures
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc

from enforcer.podresourcesapi import podresources_pb2 as pb
from enforcer.podresourcesapi import podresources_pb2_grpc as pb_grpc


@dataclass
class FakeContainer:
    name: str
    # resource name -> (device ids, NUMA nodes)
    devices: dict[str, tuple[list[str], list[int]]] = field(default_factory=dict)
    # (driver, pool, device) of its DRA claims
    claimed: list[tuple[str, str, str]] = field(default_factory=list)


class _Lister(pb_grpc.PodResourcesListerServicer):
    def __init__(self, kubelet: FakePodResources) -> None:
        self.kubelet = kubelet

    def _pod(self, namespace: str, name: str, containers: list[FakeContainer]) -> Any:
        return pb.PodResources(
            name=name,
            namespace=namespace,
            containers=[
                pb.ContainerResources(
                    name=c.name,
                    devices=[
                        pb.ContainerDevices(
                            resource_name=resource,
                            device_ids=ids,
                            topology=pb.TopologyInfo(nodes=[pb.NUMANode(ID=n) for n in nodes]),
                        )
                        for resource, (ids, nodes) in c.devices.items()
                    ],
                    dynamic_resources=[
                        pb.DynamicResource(
                            claim_name="claim",
                            claim_namespace=namespace,
                            claim_resources=[
                                pb.ClaimResource(driver_name=d, pool_name=p, device_name=n)
                                for d, p, n in c.claimed
                            ],
                        )
                    ]
                    if c.claimed
                    else [],
                )
                for c in containers
            ],
        )

    def _wait(self) -> None:
        self.kubelet.calls += 1
        if self.kubelet.hang:
            self.kubelet.release.wait(30)

    def Get(self, request: Any, context: Any) -> Any:
        self._wait()
        if not self.kubelet.get_enabled:
            context.abort(grpc.StatusCode.UNIMPLEMENTED, "feature gate KubeletPodResourcesGet off")
        key = (request.pod_namespace, request.pod_name)
        if key not in self.kubelet.pods:
            context.abort(grpc.StatusCode.UNKNOWN, f"pod {request.pod_name} not found")
        return pb.GetPodResourcesResponse(pod_resources=self._pod(*key, self.kubelet.pods[key]))

    def List(self, request: Any, context: Any) -> Any:
        self._wait()
        return pb.ListPodResourcesResponse(
            pod_resources=[self._pod(ns, n, cs) for (ns, n), cs in self.kubelet.pods.items()]
        )


class FakePodResources:
    def __init__(self, socket: Path) -> None:
        self.socket = socket
        self.pods: dict[tuple[str, str], list[FakeContainer]] = {}
        self.get_enabled = True
        self.hang = False  # answer only once `release` is set (a kubelet that does not answer)
        self.release = threading.Event()
        self.calls = 0
        self._server: Any = None

    def __enter__(self) -> FakePodResources:
        self.socket.parent.mkdir(parents=True, exist_ok=True)
        self._server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        pb_grpc.add_PodResourcesListerServicer_to_server(_Lister(self), self._server)
        self._server.add_insecure_port(f"unix://{self.socket}")
        self._server.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release.set()
        self._server.stop(grace=None)
