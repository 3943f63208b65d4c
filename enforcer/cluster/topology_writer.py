"""Writing the node's NodeResourceTopology to the API server (the object itself is built by
`enforcer.usage.nrt`, from plain data).

Synchronous, with the `kubernetes` client (imported on first use: it takes ~0.4 s): called from
a thread of its own, never from the relay's event loop. The object is owned by the Node (so it
goes when the Node goes), created when missing, and replaced whole, with the resourceVersion
last seen, when it changed; the server is asked for `fieldValidation=Strict`, so a field the
CRD does not know is an error, never silently dropped.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from enforcer.usage import (
    NRT_GROUP,
    NRT_PLURAL,
    NRT_VERSION,
    Alignment,
    Usage,
    node_resource_topology,
)

log = logging.getLogger(__name__)

CRD_NAME = f"{NRT_PLURAL}.{NRT_GROUP}"


class TopologyWriteError(Exception):
    """A write the API server did not take; the message says why, for the log."""


def _explain(exc: Exception, what: str) -> TopologyWriteError:
    status = getattr(exc, "status", None)
    reason = getattr(exc, "reason", None) or str(exc)
    if status == 403:
        why = (
            f"{what} forbidden ({reason}): the enforcer's service account needs the RBAC of "
            "deploy/components/node-resource-topology"
        )
    elif status == 404 and what.startswith("creating"):
        why = (
            f"{what}: the API server does not serve {CRD_NAME} {NRT_VERSION}; install the CRD "
            "(deploy/components/node-resource-topology)"
        )
    elif status is not None:
        body = getattr(exc, "body", None) or ""
        why = f"{what}: {status} {reason} {body}".strip()
    else:
        why = f"{what}: {exc}"
    return TopologyWriteError(why)


class TopologyWriter:
    """The NodeResourceTopology of one node."""

    REQUEST_TIMEOUT = 10.0

    def __init__(self, api_client: Callable[[], Any], node: str) -> None:
        self._make_client = api_client
        self.node = node
        self._core: Any = None
        self._custom: Any = None
        self._uid: str | None = None  # the Node's
        self._version: str | None = None  # the object's resourceVersion last seen
        self._last: dict[str, Any] | None = None  # the object last written
        self.published = False  # whether an object of ours is (as far as we know) there

    def _apis(self) -> tuple[Any, Any]:
        if self._core is None:
            from kubernetes import client

            api_client = self._make_client()
            self._core = client.CoreV1Api(api_client)
            self._custom = client.CustomObjectsApi(api_client)
        return self._core, self._custom

    def _forget(self) -> None:
        self._uid = None
        self._version = None
        self._last = None

    def write(self, usage: Usage, how: Alignment, *, force: bool = False) -> bool:
        """Brings the object in the cluster up to `usage`. False when nothing was sent (the
        object last written is the same, and `force` is not set: with it, the object is read
        back and written again if it is gone or differs). TopologyWriteError when it fails."""
        from kubernetes.client.exceptions import ApiException

        core, custom = self._apis()
        timeout = self.REQUEST_TIMEOUT
        if self._uid is None:
            try:
                node = core.read_node(self.node, _request_timeout=timeout)
            except ApiException as exc:
                raise _explain(exc, f"reading node {self.node}") from None
            except Exception as exc:  # connection refused, timeouts, TLS
                raise _explain(exc, f"reading node {self.node}") from None
            self._uid = node.metadata.uid
        assert self._uid is not None
        body = node_resource_topology(self.node, self._uid, usage, how)
        if body == self._last and not force:
            return False
        args = (NRT_GROUP, NRT_VERSION, NRT_PLURAL)
        action = f"reading NodeResourceTopology {self.node}"
        try:
            if self._version is None or force:
                try:
                    existing = custom.get_cluster_custom_object(
                        *args, self.node, _request_timeout=timeout
                    )
                except ApiException as exc:
                    if exc.status != 404:
                        raise
                    existing = None
                if existing is None:
                    self._version = None
                    action = f"creating NodeResourceTopology {self.node}"
                    created = custom.create_cluster_custom_object(
                        *args, body, field_validation="Strict", _request_timeout=timeout
                    )
                    self._done(body, created)
                    return True
                self._version = existing["metadata"]["resourceVersion"]
                if force and _same(existing, body):
                    self._last = body
                    self.published = True
                    return False
            action = f"replacing NodeResourceTopology {self.node}"
            sent = {**body, "metadata": {**body["metadata"], "resourceVersion": self._version}}
            replaced = custom.replace_cluster_custom_object(
                *args, self.node, sent, field_validation="Strict", _request_timeout=timeout
            )
        except ApiException as exc:
            if exc.status in (404, 409):
                # Gone (its Node was deleted, or someone deleted it) or changed meanwhile: read
                # everything again next time.
                self._forget()
            raise _explain(exc, action) from None
        except Exception as exc:
            raise _explain(exc, action) from None
        self._done(body, replaced)
        return True

    def _done(self, body: dict[str, Any], answer: Any) -> None:
        self._version = (answer.get("metadata") or {}).get("resourceVersion")
        self._last = body
        self.published = True
        log.debug("NodeResourceTopology %s written (resourceVersion %s)", self.node, self._version)

    def delete(self) -> None:
        """Removes the object (publishing was switched off). TopologyWriteError on failure."""
        from kubernetes.client.exceptions import ApiException

        _, custom = self._apis()
        try:
            custom.delete_cluster_custom_object(
                NRT_GROUP,
                NRT_VERSION,
                NRT_PLURAL,
                self.node,
                _request_timeout=self.REQUEST_TIMEOUT,
            )
        except ApiException as exc:
            if exc.status != 404:
                raise _explain(exc, f"deleting NodeResourceTopology {self.node}") from None
        except Exception as exc:
            raise _explain(exc, f"deleting NodeResourceTopology {self.node}") from None
        self._forget()
        self.published = False


def _same(existing: dict[str, Any], body: dict[str, Any]) -> bool:
    """Whether the object in the cluster says what `body` says (server-set metadata aside)."""
    meta = existing.get("metadata") or {}
    wanted = body["metadata"]
    return (
        {k: v for k, v in existing.items() if k != "metadata"}
        == {k: v for k, v in body.items() if k != "metadata"}
        and meta.get("labels") == wanted["labels"]
        and meta.get("ownerReferences") == wanted["ownerReferences"]
    )
