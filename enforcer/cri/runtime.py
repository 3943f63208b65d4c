"""The engine's runtime port over CRI (`CriRuntime`): what the enforcer itself asks of the runtime.

A small synchronous client: listings, re-pins through UpdateContainerResources, and a running
container's recorded creation (for adoption), each mapped to the engine's domain values and
its errors (`RuntimeAway`, `ContainerMissing`).
"""

from __future__ import annotations

from typing import Any

import grpc
from google.protobuf import json_format

from enforcer.cri import api_pb2, api_pb2_grpc
from enforcer.cri.convert import (
    container_create,
    live_container,
    record_of,
    repinned,
    request_from_statuses,
    update_request,
)
from enforcer.cri.status import AWAY
from enforcer.engine.kubelet_record import KubeletRecord
from enforcer.engine.model import LiveContainer, Pinning, Recorded
from enforcer.engine.ports import ContainerMissing, RuntimeAway
from resource_contract.bounded import Limits, load_json

# containerd's verbose status: the OCI spec and the sandbox's config, some KiB, nesting about
# ten levels; the relay's own frame bound caps what can arrive at all.
INFO_LIMITS = Limits(max_bytes=16 << 20, max_depth=64)


def unix_target(path: str) -> str:
    """A gRPC target for a socket path given with or without `unix://`."""
    path = path.removeprefix("unix://")
    return f"unix://{path}"


def _failure(exc: grpc.RpcError, what: str) -> Exception:
    code = exc.code()
    details = exc.details()
    if code == grpc.StatusCode.NOT_FOUND:
        return ContainerMissing(f"{what}: {details}")
    if code in AWAY:
        return RuntimeAway(f"{what}: {details}")
    return RuntimeError(f"{what}: {code.name}: {details}")


class CriRuntime:
    def __init__(self, socket: str, *, timeout: float = 10.0) -> None:
        self.socket = socket
        self.timeout = timeout
        self._channel = grpc.insecure_channel(unix_target(socket))
        self._stub = api_pb2_grpc.RuntimeServiceStub(self._channel)

    def close(self) -> None:
        self._channel.close()

    def repin(self, container_id: str, resources: KubeletRecord, pinning: Pinning) -> KubeletRecord:
        request = update_request(container_id, resources, pinning)
        try:
            self._stub.UpdateContainerResources(request, timeout=self.timeout)
        except grpc.RpcError as exc:
            raise _failure(exc, f"UpdateContainerResources {container_id}") from None
        return repinned(resources, pinning)

    def list_containers(self) -> list[LiveContainer]:
        try:
            reply = self._stub.ListContainers(api_pb2.ListContainersRequest(), timeout=self.timeout)
        except grpc.RpcError as exc:
            raise RuntimeAway(f"ListContainers: {exc.details()}") from None
        return [live_container(c) for c in reply.containers]

    def recorded(self, container: LiveContainer) -> Recorded | None:
        try:
            box_status, box_config = self._sandbox(container.sandbox_id)
            status, config, spec = self._container(container.id)
        except grpc.RpcError as exc:
            failure = _failure(exc, f"status of container {container.id}")
            if isinstance(failure, RuntimeAway):
                raise failure from None
            return None
        if box_config is not None and config is not None:
            request: api_pb2.CreateContainerRequest | None = api_pb2.CreateContainerRequest(
                pod_sandbox_id=container.sandbox_id, config=config, sandbox_config=box_config
            )
        else:
            # CRI-O: no creation config in its verbose status; the statuses say enough.
            request = request_from_statuses(box_status, status, spec)
        if request is None:
            return None
        current = ((spec.get("linux") or {}).get("resources") or {}).get("cpu") or {}
        return Recorded(
            create=container_create(request),
            resources=record_of(request.config.linux.resources),
            running_cpus=current.get("cpus", "") or "",
            running_mems=current.get("mems", "") or "",
        )

    def _verbose_info(self, reply: Any) -> dict[str, Any]:
        try:
            info = load_json(reply.info.get("info", "{}"), INFO_LIMITS)
        except ValueError:  # BoundError included: read as no information
            return {}
        return info if isinstance(info, dict) else {}

    def _sandbox(
        self, sandbox_id: str
    ) -> tuple[api_pb2.PodSandboxStatus, api_pb2.PodSandboxConfig | None]:
        """The sandbox's status, and the config it was created with (containerd's verbose
        status has it; None when absent)."""
        reply = self._stub.PodSandboxStatus(
            api_pb2.PodSandboxStatusRequest(pod_sandbox_id=sandbox_id, verbose=True),
            timeout=self.timeout,
        )
        config = self._verbose_info(reply).get("config")
        if not isinstance(config, dict):
            return reply.status, None
        parsed = json_format.ParseDict(
            config, api_pb2.PodSandboxConfig(), ignore_unknown_fields=True
        )
        return reply.status, parsed

    def _container(
        self, container_id: str
    ) -> tuple[api_pb2.ContainerStatus, api_pb2.ContainerConfig | None, dict[str, Any]]:
        """The container's status, the config it was created with (None when the verbose
        status has none) and its OCI runtime spec."""
        reply = self._stub.ContainerStatus(
            api_pb2.ContainerStatusRequest(container_id=container_id, verbose=True),
            timeout=self.timeout,
        )
        info = self._verbose_info(reply)
        found = info.get("runtimeSpec")
        spec: dict[str, Any] = found if isinstance(found, dict) else {}
        config = info.get("config")
        if not isinstance(config, dict):
            return reply.status, None, spec
        parsed = json_format.ParseDict(
            config, api_pb2.ContainerConfig(), ignore_unknown_fields=True
        )
        return reply.status, parsed, spec
