"""The kubelet side of the DRA driver: the plugin-registration socket and the DRA service
socket, gRPC over unix sockets, mapping kubelet's messages to and from plain values.

- `<kubelet-dir>/plugins_registry/cpu.resource-enforcer.dev-reg.sock` serves
  `pluginregistration.Registration`: kubelet's plugin watcher finds it, asks `GetInfo` (type
  `DRAPlugin`, our driver name, the service socket, and the gRPC services we serve: kubelet
  v1.37 takes `v1.DRAPlugin` or `v1beta1.DRAPlugin`; we serve v1) and reports the outcome with
  `NotifyRegistrationStatus`.
- `<kubelet-dir>/plugins/cpu.resource-enforcer.dev/dra.sock` serves
  `k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin`: NodePrepareResources / NodeUnprepareResources,
  each claim answered on its own (an error for one claim fails only that claim; kubelet retries
  it). The work is the `ClaimHandler`'s (enforcer.dra.driver), on gRPC's threads.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import grpc

from enforcer.dra.claims import AllocatedDevice
from enforcer.draapi import dra_pb2, dra_pb2_grpc, registration_pb2, registration_pb2_grpc
from resource_contract.dra_config import DRA_DRIVER

log = logging.getLogger(__name__)

DRA_SERVICE = "v1.DRAPlugin"  # k8s.io/kubelet/pkg/apis/dra/v1 DRAPluginService
PLUGIN_TYPE = "DRAPlugin"  # k8s.io/kubelet/pkg/apis/pluginregistration/v1 DRAPlugin
MAX_CLAIMS_PER_CALL = 256  # a bigger request is refused whole (kubelet sends a pod's claims)
_MAX_MESSAGE = 4 << 20


@dataclass(frozen=True)
class ClaimRef:
    namespace: str
    uid: str
    name: str


@dataclass(frozen=True)
class Prepared:
    """A claim prepared: its devices of our driver and the CDI device ids for them."""

    devices: tuple[AllocatedDevice, ...]
    cdi_ids: tuple[str, ...]


class ClaimHandler(Protocol):
    def prepare(self, claim: ClaimRef) -> Prepared:
        """Prepares one claim; raises an exception whose message kubelet is to show."""
        ...

    def unprepare(self, claim: ClaimRef) -> None:
        """Unprepares one claim (nothing when it is not prepared); raises on failure."""
        ...


def registration_socket(kubelet_dir: str) -> Path:
    return Path(kubelet_dir) / "plugins_registry" / f"{DRA_DRIVER}-reg.sock"


def service_socket(kubelet_dir: str) -> Path:
    return Path(kubelet_dir) / "plugins" / DRA_DRIVER / "dra.sock"


class _Registration(registration_pb2_grpc.RegistrationServicer):
    def __init__(self, plugin: KubeletPlugin) -> None:
        self.plugin = plugin

    def GetInfo(self, request: Any, context: Any) -> Any:
        return registration_pb2.PluginInfo(
            type=PLUGIN_TYPE,
            name=DRA_DRIVER,
            endpoint=str(self.plugin.service_path),
            supported_versions=[DRA_SERVICE],
        )

    def NotifyRegistrationStatus(self, request: Any, context: Any) -> Any:
        self.plugin.registered = bool(request.plugin_registered)
        self.plugin.registration_error = request.error or None
        if request.plugin_registered:
            log.info("kubelet registered the DRA driver %s", DRA_DRIVER)
        else:
            log.error("kubelet refused the DRA driver %s: %s", DRA_DRIVER, request.error[:500])
        return registration_pb2.RegistrationStatusResponse()


class _DRAPlugin(dra_pb2_grpc.DRAPluginServicer):
    def __init__(self, handler: ClaimHandler) -> None:
        self.handler = handler

    def NodePrepareResources(self, request: Any, context: Any) -> Any:
        response = dra_pb2.NodePrepareResourcesResponse()
        for ref in _refs(request.claims, context):
            answer = response.claims[ref.uid]
            try:
                prepared = self.handler.prepare(ref)
            except Exception as exc:  # one claim's failure is that claim's answer
                answer.error = _message(exc)
                log.error("preparing claim %s/%s failed: %s", ref.namespace, ref.name, exc)
                continue
            marked: set[str] = set()
            for device in prepared.devices:
                # The CDI ids once per request: kubelet hands a container the ids of the
                # devices of the requests it names, and one mark is enough (the runtime
                # would be given the same CDI device twice otherwise).
                first = device.request not in marked
                marked.add(device.request)
                out = answer.devices.add(
                    request_names=[device.request],
                    pool_name=device.pool,
                    device_name=device.device,
                    cdi_device_ids=list(prepared.cdi_ids) if first else [],
                )
                if device.share_id:
                    out.share_id = device.share_id
        return response

    def NodeUnprepareResources(self, request: Any, context: Any) -> Any:
        response = dra_pb2.NodeUnprepareResourcesResponse()
        for ref in _refs(request.claims, context):
            answer = response.claims[ref.uid]
            try:
                self.handler.unprepare(ref)
            except Exception as exc:
                answer.error = _message(exc)
                log.error("unpreparing claim %s/%s failed: %s", ref.namespace, ref.name, exc)
        return response


def _refs(claims: Sequence[Any], context: Any) -> list[ClaimRef]:
    if len(claims) > MAX_CLAIMS_PER_CALL:
        context.abort(
            grpc.StatusCode.INVALID_ARGUMENT,
            f"{len(claims)} claims in one call; at most {MAX_CLAIMS_PER_CALL}",
        )
    refs = []
    for claim in claims:
        if not claim.uid:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, "a claim without a uid")
        refs.append(ClaimRef(claim.namespace, claim.uid, claim.name))
    return refs


def _message(exc: Exception) -> str:
    text = str(exc) or type(exc).__name__
    return text[:2000]


class KubeletPlugin:
    """Both sockets, served until `stop`."""

    def __init__(self, kubelet_dir: str, handler: ClaimHandler) -> None:
        self.registration_path = registration_socket(kubelet_dir)
        self.service_path = service_socket(kubelet_dir)
        self.handler = handler
        self.registered = False
        self.registration_error: str | None = None
        self._servers: list[Any] = []

    def start(self) -> None:
        """Binds the service socket first (kubelet connects to it as soon as it learns of it),
        then the registration socket; a stale socket file of an earlier process is replaced.
        OSError when a socket cannot be made."""
        options: Mapping[str, int] = {
            "grpc.max_receive_message_length": _MAX_MESSAGE,
            "grpc.max_send_message_length": _MAX_MESSAGE,
        }
        for path, add in (
            (
                self.service_path,
                lambda s: dra_pb2_grpc.add_DRAPluginServicer_to_server(_DRAPlugin(self.handler), s),
            ),
            (
                self.registration_path,
                lambda s: registration_pb2_grpc.add_RegistrationServicer_to_server(
                    _Registration(self), s
                ),
            ),
        ):
            path.parent.mkdir(parents=True, exist_ok=True)
            if path.is_socket() or path.is_symlink():
                path.unlink()
            server = grpc.server(
                ThreadPoolExecutor(max_workers=2, thread_name_prefix="dra"),
                options=list(options.items()),
            )
            add(server)
            if server.add_insecure_port(f"unix://{path}") == 0:
                raise OSError(f"cannot listen on {path}")
            server.start()
            os.chmod(path, 0o600)
            self._servers.append(server)
        log.info(
            "DRA driver %s: registration %s, service %s",
            DRA_DRIVER,
            self.registration_path,
            self.service_path,
        )

    def stop(self, grace: float = 1.0) -> None:
        """Stops serving; the registration socket goes first, so kubelet deregisters us."""
        for server in reversed(self._servers):
            server.stop(grace).wait(grace + 1)
        self._servers.clear()
        for path in (self.registration_path, self.service_path):
            if path.is_socket():
                path.unlink(missing_ok=True)
