"""Publishing this node's ResourceSlices (resource.k8s.io/v1) and reading ResourceClaims, with
the `kubernetes` client (imported on first use; synchronous: call from a thread, never from the
event loop).

The slices of the pool are named `<node>-cpu.resource-enforcer.dev-<i>`, owned by the Node (they
go when the Node goes), created when missing, replaced when their spec changed, and the extra
ones deleted; every change of the devices raises the pool's generation, so the scheduler never
mixes slices of two generations.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from typing import Any

from enforcer.dra.devices import slice_specs
from resource_contract.dra_config import DRA_DRIVER

log = logging.getLogger(__name__)

GROUP, VERSION = "resource.k8s.io", "v1"
REQUEST_TIMEOUT = 10.0
RESYNC_SECONDS = 30.0


class SliceWriteError(Exception):
    """A write the API server did not take; the message says why."""


def _why(exc: Exception, what: str) -> SliceWriteError:
    status = getattr(exc, "status", None)
    if status == 403:
        return SliceWriteError(
            f"{what}: forbidden: the enforcer's service account needs the RBAC of "
            "deploy/ for resourceslices and resourceclaims"
        )
    body = str(getattr(exc, "body", "") or "")[:500]
    return SliceWriteError(f"{what}: {status or ''} {getattr(exc, 'reason', exc)} {body}".strip())


class ClusterDRA:
    """The API server, for the driver: claims read, slices written."""

    def __init__(self, api_client: Callable[[], Any], node_name: str) -> None:
        self._make_client = api_client
        self._client: Any = None
        self.node_name = node_name
        self._published: list[dict[str, Any]] | None = None
        self._synced_at = -float("inf")
        self._generation = 0

    def _api(self) -> Any:
        from kubernetes import client

        if self._client is None:
            self._client = self._make_client()
        return client.CustomObjectsApi(self._client)

    def read_claim(self, namespace: str, name: str) -> dict[str, Any]:
        try:
            claim: dict[str, Any] = self._api().get_namespaced_custom_object(
                GROUP, VERSION, namespace, "resourceclaims", name, _request_timeout=REQUEST_TIMEOUT
            )
        except Exception as exc:
            raise _why(exc, f"reading claim {namespace}/{name}") from None
        return claim

    def _owner(self) -> list[dict[str, Any]]:
        from kubernetes import client

        try:
            node = client.CoreV1Api(self._client).read_node(
                self.node_name, _request_timeout=REQUEST_TIMEOUT
            )
        except Exception as exc:
            log.warning("ResourceSlices not owned by the Node (%s)", _why(exc, "reading Node"))
            return []
        uid = node.metadata.uid if node.metadata is not None else None
        if not uid:
            return []
        return [{"apiVersion": "v1", "kind": "Node", "name": self.node_name, "uid": uid}]

    def existing(self) -> list[dict[str, Any]]:
        listing = self._api().list_cluster_custom_object(
            GROUP,
            VERSION,
            "resourceslices",
            field_selector=f"spec.nodeName={self.node_name},spec.driver={DRA_DRIVER}",
            _request_timeout=REQUEST_TIMEOUT,
        )
        items: list[dict[str, Any]] = listing.get("items", [])
        return items

    def publish(self, devices: list[dict[str, Any]], now: float | None = None) -> bool:
        """Makes the pool's slices hold `devices`; False when they already did (nothing sent).
        Unchanged devices are checked against the API server every RESYNC_SECONDS (kubelet
        wipes a driver's slices when it does not come back in time; an operator may delete
        them). SliceWriteError when the API server refuses."""
        now = time.monotonic() if now is None else now
        if self._published == devices and now - self._synced_at < RESYNC_SECONDS:
            return False
        try:
            existing = {s["metadata"]["name"]: s for s in self.existing()}
        except Exception as exc:
            raise _why(exc, "listing ResourceSlices") from None
        if self._matches(existing, devices):
            self._published, self._synced_at = devices, now
            return False
        generations = [
            s.get("spec", {}).get("pool", {}).get("generation", 0) for s in existing.values()
        ]
        self._generation = max([self._generation, *generations]) + 1
        owner = self._owner()
        api = self._api()
        wanted = {}
        for i, spec in enumerate(slice_specs(self.node_name, devices, self._generation)):
            name = f"{self.node_name}-{DRA_DRIVER}-{i}"
            body: dict[str, Any] = {
                "apiVersion": f"{GROUP}/{VERSION}",
                "kind": "ResourceSlice",
                "metadata": {"name": name, "ownerReferences": owner},
                "spec": spec,
            }
            wanted[name] = body
            try:
                if name in existing:
                    body["metadata"]["resourceVersion"] = existing[name]["metadata"][
                        "resourceVersion"
                    ]
                    api.replace_cluster_custom_object(
                        GROUP,
                        VERSION,
                        "resourceslices",
                        name,
                        body,
                        _request_timeout=REQUEST_TIMEOUT,
                    )
                else:
                    api.create_cluster_custom_object(
                        GROUP, VERSION, "resourceslices", body, _request_timeout=REQUEST_TIMEOUT
                    )
            except Exception as exc:
                raise _why(exc, f"writing ResourceSlice {name}") from None
        for name in set(existing) - set(wanted):
            try:
                api.delete_cluster_custom_object(
                    GROUP, VERSION, "resourceslices", name, _request_timeout=REQUEST_TIMEOUT
                )
            except Exception as exc:
                if getattr(exc, "status", None) != 404:
                    raise _why(exc, f"deleting ResourceSlice {name}") from None
        self._published, self._synced_at = devices, now
        log.info(
            "published %d DRA devices in %d ResourceSlices (generation %d)",
            len(devices),
            len(wanted),
            self._generation,
        )
        return True

    def _matches(self, existing: dict[str, dict[str, Any]], devices: list[dict[str, Any]]) -> bool:
        """Whether the slices there hold exactly `devices`, as one generation of the pool."""
        specs = slice_specs(self.node_name, devices, 0)
        names = [f"{self.node_name}-{DRA_DRIVER}-{i}" for i in range(len(specs))]
        if sorted(existing) != sorted(names):
            return False
        pools = {
            json.dumps(existing[n].get("spec", {}).get("pool", {}), sort_keys=True) for n in names
        }
        return len(pools) == 1 and all(
            existing[n].get("spec", {}).get("devices", []) == spec["devices"]
            for n, spec in zip(names, specs, strict=True)
        )

    def withdraw(self) -> None:
        """Deletes the pool's slices (the driver stops offering CPUs)."""
        try:
            for item in self.existing():
                self._api().delete_cluster_custom_object(
                    GROUP,
                    VERSION,
                    "resourceslices",
                    item["metadata"]["name"],
                    _request_timeout=REQUEST_TIMEOUT,
                )
        except Exception as exc:
            log.warning("%s", _why(exc, "deleting ResourceSlices"))
        self._published = None
