"""The NUMA node of another DRA driver's device, read from its ResourceSlices on this node: the
standard attribute `resource.kubernetes.io/numaNode`, else the driver's own `numaNode`.

kubelet's pod-resources API names a claim's devices (driver, pool, device) but not where they
are. Slices are listed per driver with a deadline and kept for a short while (bounded), so a
pod's containers do not each ask the API server.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

GROUP, VERSION = "resource.k8s.io", "v1"
STANDARD_NUMA = "resource.kubernetes.io/numaNode"
REQUEST_TIMEOUT = 5  # seconds
KEEP = 30.0  # seconds a driver's listing is used
MAX_DRIVERS = 32  # listings kept
MAX_DEVICES = 4096  # devices kept per driver


def numa_of(device: dict[str, Any], driver: str) -> int | None:
    """A ResourceSlice device's NUMA node from its attributes; None when it names none."""
    attributes = device.get("attributes")
    if not isinstance(attributes, dict):
        return None
    for name in (STANDARD_NUMA, f"{driver}/numaNode", "numaNode"):
        value = attributes.get(name)
        if isinstance(value, dict) and isinstance(value.get("int"), int):
            node: int = value["int"]
            return node if node >= 0 else None
    return None


class SliceNodes:
    """(driver, pool, device) -> NUMA node, from the driver's slices for `node_name`."""

    def __init__(
        self,
        api_client: Callable[[], Any],
        node_name: str,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._make_client = api_client
        self._client: Any = None
        self.node_name = node_name
        self.clock = clock
        self._listed: dict[str, tuple[float, dict[tuple[str, str], int | None]]] = {}

    def __call__(self, driver: str, pool: str, device: str) -> int | None:
        held = self._listed.get(driver)
        if held is None or self.clock() - held[0] > KEEP or (pool, device) not in held[1]:
            held = (self.clock(), self._list(driver))
            if len(self._listed) >= MAX_DRIVERS:
                self._listed.clear()
            self._listed[driver] = held
        return held[1].get((pool, device))

    def _list(self, driver: str) -> dict[tuple[str, str], int | None]:
        from kubernetes import client

        if self._client is None:
            self._client = self._make_client()
        listing: Any = client.CustomObjectsApi(self._client).list_cluster_custom_object(
            GROUP,
            VERSION,
            "resourceslices",
            field_selector=f"spec.nodeName={self.node_name},spec.driver={driver}",
            _request_timeout=REQUEST_TIMEOUT,
        )
        found: dict[tuple[str, str], int | None] = {}
        for item in listing.get("items") or []:
            spec: dict[str, Any] = item.get("spec") or {}
            pool_of: dict[str, Any] = spec.get("pool") or {}
            pool = str(pool_of.get("name", ""))
            for device in spec.get("devices") or []:
                if len(found) >= MAX_DEVICES:
                    return found
                if isinstance(device, dict) and isinstance(device.get("name"), str):
                    found[(pool, device["name"])] = numa_of(device, driver)
        return found
