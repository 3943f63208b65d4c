"""A small synchronous CRI client for what the enforcer itself asks of the runtime."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import grpc
from google.protobuf import json_format

from enforcer.cri import api_pb2, api_pb2_grpc

CONTAINER_RUNNING = api_pb2.CONTAINER_RUNNING
CONTAINER_CREATED = api_pb2.CONTAINER_CREATED
CONTAINER_EXITED = api_pb2.CONTAINER_EXITED


def unix_target(path: str) -> str:
    """A gRPC target for a socket path given with or without `unix://`."""
    path = path.removeprefix("unix://")
    return f"unix://{path}"


@dataclass(frozen=True)
class RuntimeContainer:
    """A container as the runtime reports it, with what is needed to rebuild its request."""

    id: str
    sandbox_id: str
    name: str
    attempt: int
    state: int
    labels: dict[str, str]

    @property
    def alive(self) -> bool:
        return self.state in (CONTAINER_CREATED, CONTAINER_RUNNING)


class RuntimeClient:
    def __init__(self, socket: str, *, timeout: float = 10.0) -> None:
        self.socket = socket
        self.timeout = timeout
        self._channel = grpc.insecure_channel(unix_target(socket))
        self._stub = api_pb2_grpc.RuntimeServiceStub(self._channel)

    def close(self) -> None:
        self._channel.close()

    def update_resources(
        self, container_id: str, resources: api_pb2.LinuxContainerResources
    ) -> None:
        self._stub.UpdateContainerResources(
            api_pb2.UpdateContainerResourcesRequest(container_id=container_id, linux=resources),
            timeout=self.timeout,
        )

    def list_containers(self) -> list[RuntimeContainer]:
        reply = self._stub.ListContainers(api_pb2.ListContainersRequest(), timeout=self.timeout)
        return [
            RuntimeContainer(
                id=c.id,
                sandbox_id=c.pod_sandbox_id,
                name=c.metadata.name,
                attempt=c.metadata.attempt,
                state=c.state,
                labels=dict(c.labels),
            )
            for c in reply.containers
        ]

    def list_sandboxes(self) -> list[api_pb2.PodSandbox]:
        reply = self._stub.ListPodSandbox(api_pb2.ListPodSandboxRequest(), timeout=self.timeout)
        return list(reply.items)

    def _verbose_info(self, reply: Any) -> dict[str, Any]:
        try:
            return json.loads(reply.info.get("info", "{}"))
        except ValueError:
            return {}

    def sandbox_config(self, sandbox_id: str) -> api_pb2.PodSandboxConfig | None:
        """The config the sandbox was created with, from containerd's verbose status."""
        reply = self._stub.PodSandboxStatus(
            api_pb2.PodSandboxStatusRequest(pod_sandbox_id=sandbox_id, verbose=True),
            timeout=self.timeout,
        )
        config = self._verbose_info(reply).get("config")
        if not isinstance(config, dict):
            return None
        return json_format.ParseDict(config, api_pb2.PodSandboxConfig(), ignore_unknown_fields=True)

    def container_config(
        self, container_id: str
    ) -> tuple[api_pb2.ContainerConfig | None, dict[str, Any]]:
        """The config a container was created with, and its OCI runtime spec (verbose status)."""
        reply = self._stub.ContainerStatus(
            api_pb2.ContainerStatusRequest(container_id=container_id, verbose=True),
            timeout=self.timeout,
        )
        info = self._verbose_info(reply)
        found = info.get("runtimeSpec")
        spec: dict[str, Any] = found if isinstance(found, dict) else {}
        config = info.get("config")
        if not isinstance(config, dict):
            return None, spec
        parsed = json_format.ParseDict(
            config, api_pb2.ContainerConfig(), ignore_unknown_fields=True
        )
        return parsed, spec
