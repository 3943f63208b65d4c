"""The node's configuration from the cluster: list, watch, choose, hand over, report.

One thread runs the loop below with the synchronous `kubernetes` client:

1. read the Node (its `resource-enforcer.dev/config-group` label picks the group);
2. list the ConfigMaps of the namespace once, then watch them from that list's
   resourceVersion, with bookmarks; a watch that ends (server timeout, broken connection,
   API server restarted) is resumed from the last resourceVersion seen, and one the server
   answers with 410 Gone ("Expired": that version was compacted away) is replaced by a fresh
   list;
3. after every change, choose the first of node, group, default that exists; when the choice
   (name and resourceVersion) differs from the last one, hand it to `apply` (which validates
   and applies it, or refuses it and keeps the last good configuration);
4. report each outcome on the Node and each refusal as an Event (retried until sent).

Errors never end the loop: it backs off (up to BACKOFF_MAX seconds) and tries again.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from enforcer.cluster.names import (
    CONFIG_KEY,
    GROUP_LABEL,
    NAME_PREFIX,
    candidate_names,
    configmap_source,
)
from enforcer.cluster.node_status import ConfigMapEvent, ConfigStatus, NodeReporter

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ClusterConfig:
    """One candidate ConfigMap, reduced to what the enforcer uses."""

    namespace: str
    name: str
    uid: str | None
    resource_version: str
    text: str | None  # its config.yaml; None when the key is missing

    @property
    def source(self) -> str:
        return configmap_source(self.namespace, self.name)


@dataclass(frozen=True)
class Outcome:
    """What `apply` made of a choice."""

    applied: bool
    errors: list[str]
    in_force: str  # the source in force afterwards


Apply = Callable[[ClusterConfig | None], Outcome]


class ClusterConfigSource:
    WATCH_SECONDS = 60  # server-side timeout of one watch request; the group is re-read then
    REQUEST_TIMEOUT = 10.0
    BACKOFF_MIN = 0.5
    BACKOFF_MAX = 30.0

    def __init__(
        self,
        *,
        api_client: Callable[[], Any],
        namespace: str,
        node: str,
        apply: Apply,
        on_error: Callable[[], None] | None = None,
        watch_seconds: int | None = None,
        backoff_max: float | None = None,
    ) -> None:
        self._api_client = api_client  # called in the thread: importing kubernetes is slow
        self.namespace = namespace
        self.node = node
        self.apply = apply
        self.on_error = on_error or (lambda: None)
        self.watch_seconds = watch_seconds or self.WATCH_SECONDS
        self.backoff_max = backoff_max or self.BACKOFF_MAX
        self.group: str | None = None
        self.cache: dict[str, ClusterConfig] = {}
        self.resource_version: str | None = None  # None: list before watching
        self.lists = 0  # how many times the ConfigMaps were listed (tests read it)
        self._chosen: tuple[str, str] | None = None
        self._decided = False
        self._stop = threading.Event()
        self._watch: Any = None
        self._last_error = ""
        self._last_report_error = ""
        self.core: Any = None
        self.reporter: NodeReporter | None = None
        self.thread = threading.Thread(target=self._run, name="cluster-config", daemon=True)

    # -- life cycle ----------------------------------------------------------------------------

    def start(self) -> ClusterConfigSource:
        self.thread.start()
        return self

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        w = self._watch
        if w is not None:
            w.stop()  # shuts the socket down: the blocked read returns at once
        if self.thread.is_alive():
            self.thread.join(timeout)

    @property
    def stopped(self) -> bool:
        return self._stop.is_set()

    def _run(self) -> None:
        try:
            from kubernetes import client

            self.core = client.CoreV1Api(self._api_client())
        except Exception as exc:
            log.error("configuration from the cluster is off: no API client: %s", exc)
            return
        self.reporter = NodeReporter(self.core, self.node, self.namespace)
        log.info(
            "watching ConfigMaps %s in namespace %s for node %s",
            ", ".join(candidate_names(self.node, "<group>")),
            self.namespace,
            self.node,
        )
        backoff = self.BACKOFF_MIN
        while not self._stop.is_set():
            try:
                self._flush_reports()
                self._read_group()
                if self.resource_version is None:
                    self._list()
                self._watch_once()
                backoff = self.BACKOFF_MIN
                continue
            except Exception as exc:
                if self._stop.is_set():
                    break
                if getattr(exc, "status", None) == 410:
                    # The version we watched from is gone from the API server's history.
                    log.info("ConfigMap watch expired (410 Gone); listing again")
                    self.resource_version = None
                    continue
                self._error(exc)
            self._stop.wait(backoff)
            backoff = min(backoff * 2, self.backoff_max)
        log.debug("cluster configuration loop stopped")

    def _error(self, exc: BaseException) -> None:
        status = getattr(exc, "status", None)
        reason = (
            f"API server answered {status} {getattr(exc, 'reason', '')}".strip()
            if isinstance(status, int)
            else f"{type(exc).__name__}: {exc}"
        )
        # Once per kind of failure: an API server away for an hour must not flood the log.
        if reason != self._last_error:
            log.warning("cluster configuration: %s; retrying", reason)
            self._last_error = reason
        self.on_error()

    # -- talking to the API server --------------------------------------------------------------

    def _read_group(self) -> None:
        from kubernetes.client.exceptions import ApiException

        try:
            node = self.core.read_node(self.node, _request_timeout=self.REQUEST_TIMEOUT)
            labels = node.metadata.labels or {}
        except ApiException as exc:
            if exc.status != 404:
                raise
            log.warning("node %s does not exist; its group is unknown", self.node)
            labels = {}
        group = labels.get(GROUP_LABEL) or None
        if group != self.group:
            log.info("node %s is in configuration group %s", self.node, group or "(none)")
            self.group = group
            if self._decided:
                self._decide()

    def _list(self) -> None:
        listed = self.core.list_namespaced_config_map(
            self.namespace, _request_timeout=self.REQUEST_TIMEOUT
        )
        api = self.core.api_client
        cache = {}
        for item in listed.items:
            config = self._config_of(api.sanitize_for_serialization(item))
            if config is not None:
                cache[config.name] = config
        self.cache = cache
        self.resource_version = listed.metadata.resource_version
        self.lists += 1
        self._last_error = ""
        log.debug(
            "listed ConfigMaps at resourceVersion %s: %s", self.resource_version, sorted(cache)
        )
        self._decide()

    def _watch_once(self) -> None:
        from kubernetes import watch

        w = watch.Watch()
        self._watch = w
        try:
            for event in w.stream(
                self.core.list_namespaced_config_map,
                self.namespace,
                resource_version=self.resource_version,
                allow_watch_bookmarks=True,
                timeout_seconds=self.watch_seconds,
                # A dead connection (no bookmark, no close) must not hang the loop forever.
                _request_timeout=(self.REQUEST_TIMEOUT, self.watch_seconds + self.REQUEST_TIMEOUT),
            ):
                if self._stop.is_set():
                    return
                self._last_error = ""
                self._on_event(event["type"], event["raw_object"])
                if self.reporter is not None and self.reporter.pending:
                    self._flush_reports()  # one that failed before: bookmarks retry it too
        finally:
            self._watch = None

    def _on_event(self, kind: str, obj: dict[str, Any]) -> None:
        metadata = obj.get("metadata") or {}
        version = metadata.get("resourceVersion")
        if kind == "BOOKMARK":
            if version:
                self.resource_version = version
            return
        name = metadata.get("name", "")
        if name.startswith(NAME_PREFIX):
            if kind in ("ADDED", "MODIFIED"):
                config = self._config_of(obj)
                if config is not None:
                    self.cache[name] = config
            elif kind == "DELETED":
                self.cache.pop(name, None)
        if version:
            self.resource_version = version
        if name.startswith(NAME_PREFIX):
            self._decide()

    def _config_of(self, obj: dict[str, Any]) -> ClusterConfig | None:
        metadata = obj.get("metadata") or {}
        name = metadata.get("name", "")
        if not name.startswith(NAME_PREFIX):
            return None
        return ClusterConfig(
            namespace=metadata.get("namespace") or self.namespace,
            name=name,
            uid=metadata.get("uid"),
            resource_version=str(metadata.get("resourceVersion", "")),
            text=(obj.get("data") or {}).get(CONFIG_KEY),
        )

    # -- choosing, applying, reporting ----------------------------------------------------------

    def chosen(self) -> ClusterConfig | None:
        for name in candidate_names(self.node, self.group):
            if name in self.cache:
                return self.cache[name]
        return None

    def _decide(self) -> None:
        chosen = self.chosen()
        key = None if chosen is None else (chosen.name, chosen.resource_version)
        if self._decided and key == self._chosen:
            return
        outcome = self.apply(chosen)  # raises only when stopping: then it is tried again
        self._decided = True
        self._chosen = key
        status = ConfigStatus(
            source=chosen.source if chosen is not None else outcome.in_force,
            resource_version=chosen.resource_version if chosen is not None else None,
            applied=outcome.applied,
            errors=outcome.errors,
            in_force=outcome.in_force,
        )
        refusal = None
        if chosen is not None and not outcome.applied:
            refusal = ConfigMapEvent(
                namespace=chosen.namespace,
                configmap=chosen.name,
                uid=chosen.uid,
                resource_version=chosen.resource_version,
                errors=outcome.errors,
                kept=outcome.in_force,
            )
        assert self.reporter is not None
        self.reporter.report(status, refusal)
        self._flush_reports()

    def _flush_reports(self) -> None:
        reporter = self.reporter
        if reporter is None or not reporter.pending:
            return
        try:
            reporter.flush(self.REQUEST_TIMEOUT)
        except Exception as exc:
            # Kept for the next round; a failing report must not stop the watching.
            reason = f"cannot report on node {self.node} yet: {getattr(exc, 'reason', None) or exc}"
            if reason != self._last_report_error:
                log.warning("cluster configuration: %s", reason)
                self._last_report_error = reason
            self.on_error()
        else:
            self._last_report_error = ""
