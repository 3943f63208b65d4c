"""Reporting configuration outcomes to the cluster: the Node's status annotation, and an Event
for each refusal.

Writes that fail (the API server is away) are kept and retried by the caller's loop; only the
newest status matters, and a few refusal Events are kept, older ones dropped.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass, field
from typing import Any

from enforcer.cluster.names import STATUS_ANNOTATION

log = logging.getLogger(__name__)

MAX_PENDING_EVENTS = 8
COMPONENT = "resource-enforcer"


def now_rfc3339() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


@dataclass(frozen=True)
class ConfigStatus:
    """What the annotation says: which configuration was tried, and how it went."""

    source: str  # configmap/<ns>/<name>, file:<path>, builtin
    resource_version: str | None
    applied: bool
    errors: list[str]
    in_force: str  # the source in force afterwards (the last good one, after a refusal)
    time: str = field(default_factory=now_rfc3339)

    def to_json(self) -> str:
        return json.dumps(
            {
                "source": self.source,
                "resourceVersion": self.resource_version,
                "applied": self.applied,
                "errors": self.errors,
                "inForce": self.in_force,
                "time": self.time,
            },
            sort_keys=True,
        )


@dataclass(frozen=True)
class ConfigMapEvent:
    """A ConfigMap this node did not apply: the Event that says why, and what it kept instead
    (not a `enforcer.refusal.Refusal`, which is the core refusing a container)."""

    namespace: str
    configmap: str
    uid: str | None
    resource_version: str | None
    errors: list[str]
    kept: str


class NodeReporter:
    """Pending reports for one node, sent by `flush()` from the cluster thread."""

    def __init__(self, core: Any, node: str, namespace: str) -> None:
        self.core = core  # kubernetes.client.CoreV1Api
        self.node = node
        self.namespace = namespace
        self._status: ConfigStatus | None = None
        self._events: list[ConfigMapEvent] = []

    def report(self, status: ConfigStatus, refusal: ConfigMapEvent | None = None) -> None:
        self._status = status
        if refusal is not None:
            self._events = [*self._events, refusal][-MAX_PENDING_EVENTS:]

    @property
    def pending(self) -> bool:
        return self._status is not None or bool(self._events)

    def flush(self, timeout: float) -> None:
        """Sends what is pending, the Node's status first; raises (with the rest still pending)
        when the API server does not take it. An Event it refuses for good (a 4xx other than
        429) is dropped, so that one bad Event never holds the reports back."""
        status = self._status
        if status is not None:
            body = {"metadata": {"annotations": {STATUS_ANNOTATION: status.to_json()}}}
            self.core.patch_node(
                self.node,
                body,
                _content_type="application/merge-patch+json",
                _request_timeout=timeout,
            )
            if self._status is status:
                self._status = None
            log.debug("node %s annotated: %s", self.node, status.to_json())
        while self._events:
            try:
                self._send_event(self._events[0], timeout)
            except Exception as exc:
                code = getattr(exc, "status", None)
                if not (isinstance(code, int) and 400 <= code < 500 and code != 429):
                    raise
                log.warning("the API server refused an Event (%s); dropped", code)
            self._events.pop(0)

    def _send_event(self, refusal: ConfigMapEvent, timeout: float) -> None:
        stamp = now_rfc3339()
        message = (
            f"node {self.node} refused ConfigMap {refusal.namespace}/{refusal.configmap} "
            f"(resourceVersion {refusal.resource_version}), keeping {refusal.kept}: "
            + "; ".join(refusal.errors)
        )
        # Kubernetes caps an Event's message at 1 kiB.
        if len(message) > 1024:
            message = message[:1021] + "..."
        body = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {
                "name": f"{refusal.configmap}.{time.time_ns():x}"[:253],
                "namespace": refusal.namespace,
            },
            "involvedObject": {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "namespace": refusal.namespace,
                "name": refusal.configmap,
                "uid": refusal.uid,
                "resourceVersion": refusal.resource_version,
            },
            "reason": "ConfigRefused",
            "message": message,
            "type": "Warning",
            "source": {"component": COMPONENT, "host": self.node},
            "reportingComponent": "resource-enforcer.dev/enforcer",
            "reportingInstance": self.node,
            "firstTimestamp": stamp,
            "lastTimestamp": stamp,
            "count": 1,
        }
        self.core.create_namespaced_event(refusal.namespace, body, _request_timeout=timeout)
