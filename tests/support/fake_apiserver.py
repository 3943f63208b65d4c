"""A small Kubernetes API server for tests: the few endpoints the enforcer uses, spoken the way
the real one speaks them, so the real `kubernetes` client can be driven against it.

- ConfigMaps: list (with the list's resourceVersion) and watch (`?watch=1`, from a
  resourceVersion, history replayed, BOOKMARK events with `allowWatchBookmarks`, an ERROR
  event with a 410 "Expired" Status for a version older than the compacted history,
  `timeoutSeconds`); a watch without a resourceVersion starts with ADDED for every object.
- Nodes: get, and patch (JSON merge patch and strategic merge patch; for the maps the enforcer
  patches, annotations and labels, the two are the same).
- Events: create.
- Custom resources of the CRDs installed with `install_crd()` (cluster-scoped ones: the
  NodeResourceTopology): get, list, create, replace (PUT, resourceVersion checked: 409 on a
  stale one), merge patch and delete, each write decoded and validated against the CRD's own
  OpenAPI schema as the real server does (tests/support/crd_schema.py): unknown fields are a
  400 under `fieldValidation=Strict`, else pruned with a `Warning` header; schema violations a
  422 Invalid naming every field. Without the CRD, its paths are 404, as in a cluster where
  it was never installed. Deleting a Node deletes the custom objects it owns (ownerReferences),
  as the garbage collector does.

Test controls: put/delete ConfigMaps, set a Node's labels, `expire()` (compact the history and
end open watches, so the client's next watch gets 410 Gone), `stop()`/`start()` on the same
port (connections cut, state kept), and `kubeconfig(path)` writing a kubeconfig for it.
Requests must carry the bearer token of that kubeconfig.

One resourceVersion counter for everything, as etcd's revision is.
"""

from __future__ import annotations

import contextlib
import copy
import queue
import socket
import threading
import time
import uuid
from dataclasses import dataclass, field
from http.server import ThreadingHTTPServer
from pathlib import Path
from typing import Any

import yaml

from tests.support.crd_schema import CustomResource, served_versions
from tests.support.fake_apiserver_http import TOKEN, handler_for, status_body


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch (null deletes a key)."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


@dataclass
class Watch:
    namespace: str
    events: queue.Queue[dict[str, Any] | None] = field(default_factory=queue.Queue)


class FakeAPIServer:
    BOOKMARK_SECONDS = 0.5  # the real one sends them about once a minute

    def __init__(self, port: int = 0) -> None:
        self.port = port
        self.rv = 1
        self.configmaps: dict[tuple[str, str], dict[str, Any]] = {}
        self.nodes: dict[str, dict[str, Any]] = {}
        self.events: list[dict[str, Any]] = []
        self.history: list[tuple[int, str, dict[str, Any]]] = []  # (rv, type, object)
        self.compacted = 0  # watches from before this resourceVersion get 410
        self.requests: list[tuple[str, str]] = []  # (method, path?query)
        self.fail_patches = 0  # answer the next N node patches with 500
        # Custom resources: (group, version, plural) -> the served version and its schema;
        # (group, plural) -> name -> the stored object (one storage for all versions).
        self.crds: dict[tuple[str, str, str], CustomResource] = {}
        self.custom: dict[tuple[str, str], dict[str, dict[str, Any]]] = {}
        # Every custom-object write the server answered: (time.monotonic(), method, name,
        # code), and what it refused or warned about, for the tests to read.
        self.custom_writes: list[tuple[float, str, str, int]] = []
        self.refusals: list[dict[str, Any]] = []
        self.warnings: list[str] = []
        self._watches: list[Watch] = []
        self.lock = threading.RLock()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self.connections: set[socket.socket] = set()
        self.closing = threading.Event()

    # -- running -------------------------------------------------------------------------------

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def running(self) -> bool:
        return self._server is not None

    def start(self) -> FakeAPIServer:
        self.closing.clear()
        server = ThreadingHTTPServer(("127.0.0.1", self.port), handler_for(self))
        server.daemon_threads = True
        self.port = server.server_address[1]
        self._server = server
        self._thread = threading.Thread(
            target=server.serve_forever, args=(0.05,), daemon=True, name="fake-api"
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        """Goes away as a crashed API server does: listening stops, connections are cut."""
        server = self._server
        if server is None:
            return
        self._server = None
        self.closing.set()
        server.shutdown()
        server.server_close()
        with self.lock:
            for w in self._watches:
                w.events.put(None)
            self._watches.clear()
            conns, self.connections = list(self.connections), set()
        for conn in conns:
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)
        if self._thread is not None:
            self._thread.join(5)

    def __enter__(self) -> FakeAPIServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def kubeconfig(self, path: str | Path) -> str:
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "fake", "cluster": {"server": self.url}}],
            "users": [{"name": "enforcer", "user": {"token": TOKEN}}],
            "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "enforcer"}}],
            "current-context": "fake",
        }
        Path(path).write_text(yaml.safe_dump(config))
        return str(path)

    # -- test controls ---------------------------------------------------------------------------

    def _bump(self) -> str:
        self.rv += 1
        return str(self.rv)

    def _record(self, kind: str, obj: dict[str, Any]) -> None:
        self.history.append((self.rv, kind, copy.deepcopy(obj)))
        ns = obj["metadata"].get("namespace")
        for w in self._watches:
            if w.namespace == ns:
                w.events.put({"type": kind, "object": copy.deepcopy(obj)})

    def put_configmap(self, namespace: str, name: str, data: dict[str, str]) -> dict[str, Any]:
        with self.lock:
            old = self.configmaps.get((namespace, name))
            obj = {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {
                    "name": name,
                    "namespace": namespace,
                    "uid": old["metadata"]["uid"] if old else str(uuid.uuid4()),
                    "resourceVersion": self._bump(),
                    "creationTimestamp": old["metadata"]["creationTimestamp"] if old else _now(),
                },
                "data": dict(data),
            }
            self.configmaps[(namespace, name)] = obj
            self._record("MODIFIED" if old else "ADDED", obj)
            return copy.deepcopy(obj)

    def delete_configmap(self, namespace: str, name: str) -> None:
        with self.lock:
            obj = self.configmaps.pop((namespace, name))
            obj["metadata"]["resourceVersion"] = self._bump()
            self._record("DELETED", obj)

    def put_node(self, name: str, labels: dict[str, str] | None = None) -> None:
        with self.lock:
            node = self.nodes.get(name) or {
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {
                    "name": name,
                    "uid": str(uuid.uuid4()),
                    "creationTimestamp": _now(),
                    "annotations": {},
                },
            }
            node["metadata"]["labels"] = dict(labels or {})
            node["metadata"]["resourceVersion"] = self._bump()
            self.nodes[name] = node

    def delete_node(self, name: str) -> None:
        """Deletes a Node, and (as the garbage collector does) every custom object it owns."""
        with self.lock:
            node = self.nodes.pop(name)
            uid = node["metadata"]["uid"]
            for objects in self.custom.values():
                for key, obj in list(objects.items()):
                    refs = obj["metadata"].get("ownerReferences") or []
                    if any(r.get("uid") == uid for r in refs):
                        del objects[key]

    def install_crd(self, crd: dict[str, Any] | str | Path) -> None:
        """Serves a CustomResourceDefinition (a parsed manifest, or a YAML file holding one)."""
        if not isinstance(crd, dict):
            docs = [d for d in yaml.safe_load_all(Path(crd).read_text()) if d]
            (crd,) = [d for d in docs if d.get("kind") == "CustomResourceDefinition"]
        with self.lock:
            for served in served_versions(crd):
                if served.namespaced:
                    raise NotImplementedError("only cluster-scoped custom resources are served")
                self.crds[(served.group, served.version, served.plural)] = served
                self.custom.setdefault((served.group, served.plural), {})

    def custom_object(self, group: str, plural: str, name: str) -> dict[str, Any] | None:
        with self.lock:
            obj = self.custom.get((group, plural), {}).get(name)
            return copy.deepcopy(obj)

    def annotation(self, node: str, key: str) -> str | None:
        with self.lock:
            return (self.nodes[node]["metadata"].get("annotations") or {}).get(key)

    def expire(self) -> None:
        """Compacts the history up to now and ends every open watch: a client resuming from a
        version it saw before gets 410 Gone."""
        with self.lock:
            self.compacted = self.rv + 1
            self.history.clear()
            for w in self._watches:
                w.events.put(None)
            self._watches.clear()

    def count(self, method: str, prefix: str) -> int:
        with self.lock:
            return sum(1 for m, p in self.requests if m == method and p.startswith(prefix))

    # -- API -------------------------------------------------------------------------------------

    def list_configmaps(self, namespace: str) -> dict[str, Any]:
        with self.lock:
            items = [
                copy.deepcopy(o)
                for (ns, _), o in sorted(self.configmaps.items())
                if ns == namespace
            ]
            return {
                "kind": "ConfigMapList",
                "apiVersion": "v1",
                "metadata": {"resourceVersion": str(self.rv)},
                "items": items,
            }

    def open_watch(
        self, namespace: str, since: str | None
    ) -> tuple[Watch | None, list[dict[str, Any]]]:
        """The events to replay and the watch for what follows; (None, [error]) when `since`
        was compacted away."""
        with self.lock:
            replay: list[dict[str, Any]] = []
            if not since or since == "0":
                for (ns, _), obj in sorted(self.configmaps.items()):
                    if ns == namespace:
                        replay.append({"type": "ADDED", "object": copy.deepcopy(obj)})
            else:
                start = int(since)
                if start < self.compacted:
                    message = f"too old resource version: {start} ({self.compacted})"
                    return None, [{"type": "ERROR", "object": status_body(410, "Expired", message)}]
                for rv, kind, obj in self.history:
                    if rv > start and obj["metadata"].get("namespace") == namespace:
                        replay.append({"type": kind, "object": copy.deepcopy(obj)})
            w = Watch(namespace)
            self._watches.append(w)
            return w, replay

    def close_watch(self, w: Watch) -> None:
        with self.lock:
            if w in self._watches:
                self._watches.remove(w)

    def patch_node(self, name: str, patch: dict[str, Any]) -> dict[str, Any] | None:
        with self.lock:
            node = self.nodes.get(name)
            if node is None:
                return None
            meta_patch = dict(patch.get("metadata") or {})
            for key in ("name", "uid", "resourceVersion", "creationTimestamp"):
                meta_patch.pop(key, None)
            node = merge_patch(node, {**patch, "metadata": meta_patch})
            node["metadata"]["resourceVersion"] = self._bump()
            self.nodes[name] = node
            return copy.deepcopy(node)

    def write_custom(
        self,
        served: CustomResource,
        method: str,
        name: str | None,
        body: Any,
        field_validation: str,
    ) -> tuple[int, dict[str, Any], list[str]]:
        """A create (POST), replace (PUT) or merge patch (PATCH) of a custom object, decided as
        the API server decides it: (code, body, warnings)."""
        with self.lock:
            objects = self.custom[(served.group, served.plural)]
            old = objects.get(name) if name else None
            what = f"{served.plural}.{served.group}"
            if method in ("PUT", "PATCH") and old is None:
                return 404, status_body(404, "NotFound", f'{what} "{name}" not found'), []
            if not isinstance(body, dict):
                return 400, status_body(400, "BadRequest", "the body must be a JSON object"), []
            if method == "PATCH":
                assert old is not None
                body = merge_patch(old, body)
            code, refusal = self._decode_check(served, method, name, body, old)
            if refusal is not None:
                return code, refusal, []
            checked = served.schema.check(body)
            if checked.unknown and field_validation == "Strict":
                fields = ", ".join(f'unknown field "{f}"' for f in checked.unknown)
                return 400, status_body(400, "BadRequest", f"strict decoding error: {fields}"), []
            warnings = (
                [f'unknown field "{f}"' for f in checked.unknown]
                if field_validation != "Ignore"
                else []
            )
            obj_name = checked.obj.get("metadata", {}).get("name") or name or ""
            if checked.causes:
                causes = [
                    {"reason": c.reason, "message": c.message, "field": c.field}
                    for c in checked.causes
                ]
                listed = ", ".join(c.message for c in checked.causes)
                status = status_body(
                    422,
                    "Invalid",
                    f'{served.kind}.{served.group} "{obj_name}" is invalid: [{listed}]',
                )
                status["details"] = {
                    "name": obj_name,
                    "group": served.group,
                    "kind": served.kind,
                    "causes": causes,
                }
                return 422, status, warnings
            obj = checked.obj
            meta = obj["metadata"]
            if old is None:
                if obj_name in objects:
                    message = f'{what} "{obj_name}" already exists'
                    return 409, status_body(409, "AlreadyExists", message), warnings
                meta["uid"] = str(uuid.uuid4())
                meta["creationTimestamp"] = _now()
                meta["generation"] = 1
            else:
                for key in ("uid", "creationTimestamp"):
                    meta[key] = old["metadata"][key]
                changed = {k: v for k, v in obj.items() if k != "metadata"} != {
                    k: v for k, v in old.items() if k != "metadata"
                }
                meta["generation"] = old["metadata"]["generation"] + (1 if changed else 0)
            meta["resourceVersion"] = self._bump()
            objects[obj_name] = obj
            return (201 if old is None else 200), copy.deepcopy(obj), warnings

    def _decode_check(
        self,
        served: CustomResource,
        method: str,
        name: str | None,
        body: dict[str, Any],
        old: dict[str, Any] | None,
    ) -> tuple[int, dict[str, Any] | None]:
        """The checks made while decoding, before the schema: apiVersion and kind, the name
        against the URL, resourceVersion rules."""
        if body.get("apiVersion") != served.api_version or body.get("kind") != served.kind:
            message = (
                f"the API version in the data ({body.get('apiVersion')}) and kind "
                f"({body.get('kind')}) do not match the expected {served.api_version} "
                f"{served.kind}"
            )
            return 400, status_body(400, "BadRequest", message)
        meta = body.get("metadata")
        if not isinstance(meta, dict):
            return 0, None  # the schema check names it
        if method == "POST" and meta.get("resourceVersion"):
            message = "resourceVersion should not be set on objects to be created"
            return 400, status_body(400, "BadRequest", message)
        if method in ("PUT", "PATCH"):
            assert old is not None
            if meta.get("name") != name:
                message = (
                    f"the name of the object ({meta.get('name')}) does not match the name "
                    f"on the URL ({name})"
                )
                return 400, status_body(400, "BadRequest", message)
            rv = meta.get("resourceVersion")
            if method == "PUT" and not rv:
                status = status_body(
                    422,
                    "Invalid",
                    f'{served.kind}.{served.group} "{name}" is invalid: metadata.'
                    "resourceVersion: Invalid value: 0x0: must be specified for an update",
                )
                return 422, status
            if rv and rv != old["metadata"]["resourceVersion"]:
                message = (
                    f'Operation cannot be fulfilled on {served.plural}.{served.group} "{name}":'
                    " the object has been modified; please apply your changes to the latest "
                    "version and try again"
                )
                return 409, status_body(409, "Conflict", message)
        return 0, None

    def delete_custom(self, served: CustomResource, name: str) -> tuple[int, dict[str, Any]]:
        with self.lock:
            objects = self.custom[(served.group, served.plural)]
            if objects.pop(name, None) is None:
                what = f"{served.plural}.{served.group}"
                return 404, status_body(404, "NotFound", f'{what} "{name}" not found')
            self._bump()
            return 200, {
                "kind": "Status",
                "apiVersion": "v1",
                "metadata": {},
                "status": "Success",
                "details": {"name": name, "group": served.group, "kind": served.plural},
            }

    def create_event(self, namespace: str, event: dict[str, Any]) -> dict[str, Any]:
        with self.lock:
            meta = event.setdefault("metadata", {})
            if not meta.get("name"):
                meta["name"] = meta.get("generateName", "event.") + uuid.uuid4().hex[:5]
            meta["namespace"] = namespace
            meta["uid"] = str(uuid.uuid4())
            meta["resourceVersion"] = self._bump()
            meta["creationTimestamp"] = _now()
            self.events.append(copy.deepcopy(event))
            return event
