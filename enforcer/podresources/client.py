"""The client of kubelet's pod-resources API (v1, `<kubelet-dir>/pod-resources/kubelet.sock`).

For one container it reads the devices device plugins gave it, with the NUMA nodes their
TopologyInfo names, and the devices of its DRA claims, whose NUMA node comes from their
driver's ResourceSlice (`resource.kubernetes.io/numaNode`, `slices.SliceNodes`) since the API
does not carry it. Every call has a deadline; a kubelet that does not answer is one log line and
a decision without the devices (never a refusal), and is not asked again for a while, so that
container creations do not each wait out the deadline.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from typing import Any

from enforcer.engine.model import DeviceFacts

log = logging.getLogger("enforcer")

DEADLINE = 2.0  # seconds for one call
QUIET = 30.0  # seconds without asking after kubelet did not answer
MAX_MESSAGE = 4 << 20  # a List of every pod on a node fits easily
MAX_DEVICES = 64  # names kept per container (a bound on what a peer feeds us)

# (driver, pool, device) -> its NUMA node, None when its slice says none.
NodeOf = Callable[[str, str, str], int | None]


def socket_path(kubelet_dir: str) -> str:
    return os.path.join(kubelet_dir, "pod-resources", "kubelet.sock")


class PodResourcesClient:
    def __init__(
        self,
        path: str,
        *,
        node_of: NodeOf | None = None,
        deadline: float = DEADLINE,
        quiet: float = QUIET,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.path = path
        self.node_of = node_of
        self.deadline = deadline
        self.quiet = quiet
        self.clock = clock
        self._quiet_until = -float("inf")
        self._channel: Any = None
        self._stub: Any = None

    def _connect(self) -> Any:
        import grpc

        from enforcer.podresourcesapi import podresources_pb2_grpc as api

        if self._stub is None:
            self._channel = grpc.insecure_channel(
                f"unix://{self.path}",
                options=[("grpc.max_receive_message_length", MAX_MESSAGE)],
            )
            self._stub = api.PodResourcesListerStub(self._channel)
        return self._stub

    def close(self) -> None:
        if self._channel is not None:
            self._channel.close()
        self._channel = self._stub = None

    def devices_of(self, namespace: str, pod: str, container: str) -> DeviceFacts | None:
        """The container's devices and their NUMA nodes (empty when it has none); None when
        kubelet could not be asked (logged)."""
        what = f"{namespace}/{pod} container {container}"
        if self.clock() < self._quiet_until:
            log.info(
                "%s: placed without preferCloseToDevices (kubelet's pod-resources API did not "
                "answer lately; asked again in %.0f s)",
                what,
                self._quiet_until - self.clock(),
            )
            return None
        if not os.path.exists(self.path):
            self._failed(what, f"no socket at {self.path}")
            return None
        try:
            resources = self._pod(namespace, pod)
        except Exception as exc:  # grpc.RpcError and anything a broken peer makes us raise
            self._failed(what, _described(exc))
            return None
        if resources is None:
            log.info("%s: kubelet's pod-resources API does not list its pod", what)
            return DeviceFacts()
        for c in resources.containers:
            if c.name == container:
                return self._facts(c, what)
        return DeviceFacts()

    def _failed(self, what: str, why: str) -> None:
        self._quiet_until = self.clock() + self.quiet
        self.close()
        log.warning(
            "%s: placed without preferCloseToDevices: kubelet's pod-resources API at %s did "
            "not answer (%s); not asked again for %.0f s",
            what,
            self.path,
            why,
            self.quiet,
        )

    def _pod(self, namespace: str, pod: str) -> Any:
        """The pod's PodResources, by Get (kubelet's KubeletPodResourcesGet), else by List."""
        import grpc

        from enforcer.podresourcesapi import podresources_pb2 as pb

        stub = self._connect()
        try:
            answer = stub.Get(
                pb.GetPodResourcesRequest(pod_name=pod, pod_namespace=namespace),
                timeout=self.deadline,
            )
            return answer.pod_resources if answer.HasField("pod_resources") else None
        except grpc.RpcError as exc:
            if exc.code() not in (grpc.StatusCode.UNIMPLEMENTED, grpc.StatusCode.UNKNOWN):
                raise
        listing = stub.List(pb.ListPodResourcesRequest(), timeout=self.deadline)
        for found in listing.pod_resources:
            if found.name == pod and found.namespace == namespace:
                return found
        return None

    def _facts(self, container: Any, what: str) -> DeviceFacts:
        names: list[str] = []
        nodes: set[int] = set()
        for d in container.devices:
            names.extend(f"{d.resource_name}={i}" for i in d.device_ids)
            nodes.update(n.ID for n in d.topology.nodes)
        for dynamic in container.dynamic_resources:
            for r in dynamic.claim_resources:
                if not r.device_name:
                    continue
                names.append(f"{r.driver_name}/{r.pool_name}/{r.device_name}")
                node = self._slice_node(r.driver_name, r.pool_name, r.device_name, what)
                if node is not None:
                    nodes.add(node)
        if len(names) > MAX_DEVICES:
            names = [*names[:MAX_DEVICES], f"... {len(names) - MAX_DEVICES} more"]
        facts = DeviceFacts(tuple(names), tuple(sorted(n for n in nodes if 0 <= n < 1 << 16)))
        if names:
            log.info(
                "%s: kubelet gave it %s on NUMA node(s) %s",
                what,
                ", ".join(names),
                ",".join(map(str, facts.nodes)) or "none reported",
            )
        return facts

    def _slice_node(self, driver: str, pool: str, device: str, what: str) -> int | None:
        if self.node_of is None:
            return None
        try:
            return self.node_of(driver, pool, device)
        except Exception as exc:  # the API server's trouble is not the container's
            log.warning(
                "%s: NUMA node of DRA device %s/%s/%s not read from its ResourceSlice: %s",
                what,
                driver,
                pool,
                device,
                exc,
            )
            return None


def _described(exc: Exception) -> str:
    code = getattr(exc, "code", None)
    details = getattr(exc, "details", None)
    if callable(code) and callable(details):
        return f"{code().name}: {details()}"
    return f"{type(exc).__name__}: {exc}"
