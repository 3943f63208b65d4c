"""The fake API server's HTTP side: routing, authentication, chunked watch streams and the
Status bodies the real server answers with (the objects live in `fake_apiserver`)."""

from __future__ import annotations

import contextlib
import copy
import json
import queue
import socket
import time
from collections.abc import Sequence
from http.server import BaseHTTPRequestHandler
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs, urlsplit

if TYPE_CHECKING:
    from tests.support.fake_apiserver import FakeAPIServer, Watch

TOKEN = "fake-apiserver-token"


def status_body(code: int, reason: str, message: str) -> dict[str, Any]:
    """A Kubernetes Status object of a failed request."""
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }


def handler_for(api: FakeAPIServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive and chunked watches, as the real one

        def setup(self) -> None:
            super().setup()
            with api.lock:
                api.connections.add(self.connection)

        def finish(self) -> None:
            with api.lock:
                api.connections.discard(self.connection)
            with contextlib.suppress(OSError):
                super().finish()

        def log_message(self, *args: object) -> None:
            pass

        def _send(self, code: int, body: dict[str, Any], warnings: Sequence[str] = ()) -> None:
            payload = json.dumps(body).encode()
            self.send_response(code)
            for warning in warnings:
                self.send_header("Warning", warning)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def _not_found(self, what: str) -> None:
            self._send(404, status_body(404, "NotFound", f"{what} not found"))

        def _body(self) -> Any:
            length = int(self.headers.get("Content-Length") or 0)
            return json.loads(self.rfile.read(length) or b"null")

        def _route(self, method: str) -> None:
            url = urlsplit(self.path)
            with api.lock:
                api.requests.append((method, self.path))
            if self.headers.get("Authorization") != f"Bearer {TOKEN}":
                self._send(401, status_body(401, "Unauthorized", "Unauthorized"))
                return
            parts = url.path.strip("/").split("/")
            query = {k: v[-1] for k, v in parse_qs(url.query).items()}
            if parts[0] == "apis" and len(parts) in (4, 5):
                self._custom(method, parts[1:], query)
                return
            if parts[:2] != ["api", "v1"]:
                self._not_found(url.path)
                return
            rest = parts[2:]
            if (
                method == "GET"
                and len(rest) == 3
                and rest[0] == "namespaces"
                and rest[2] == "configmaps"
            ):
                self._configmaps(rest[1], query)
            elif len(rest) == 2 and rest[0] == "nodes" and method in ("GET", "PATCH"):
                self._node(method, rest[1])
            elif (
                method == "POST"
                and len(rest) == 3
                and rest[0] == "namespaces"
                and rest[2] == "events"
            ):
                self._send(201, api.create_event(rest[1], self._body()))
            else:
                self._not_found(url.path)

        def do_GET(self) -> None:
            self._route("GET")

        def do_PATCH(self) -> None:
            self._route("PATCH")

        def do_POST(self) -> None:
            self._route("POST")

        def do_PUT(self) -> None:
            self._route("PUT")

        def do_DELETE(self) -> None:
            self._route("DELETE")

        def _custom(self, method: str, parts: list[str], query: dict[str, str]) -> None:
            group, version, plural = parts[:3]
            name = parts[3] if len(parts) == 4 else None
            with api.lock:
                served = api.crds.get((group, version, plural))
            if served is None:
                message = "the server could not find the requested resource"
                self._send(404, status_body(404, "NotFound", message))
                return
            if method == "GET":
                with api.lock:
                    objects = api.custom[(group, plural)]
                    if name is None:
                        items = [copy.deepcopy(o) for _, o in sorted(objects.items())]
                        body = {
                            "apiVersion": served.api_version,
                            "kind": f"{served.kind}List",
                            "metadata": {"resourceVersion": str(api.rv)},
                            "items": items,
                        }
                        self._send(200, body)
                        return
                    obj = copy.deepcopy(objects.get(name))
                if obj is None:
                    self._not_found(f'{plural}.{group} "{name}"')
                else:
                    obj["apiVersion"] = served.api_version  # served in the asked version
                    self._send(200, obj)
                return
            if method == "DELETE" and name is not None:
                code, body = api.delete_custom(served, name)
                self._send(code, body)
                return
            if (method == "POST") != (name is None) or method not in ("POST", "PUT", "PATCH"):
                self._send(405, status_body(405, "MethodNotAllowed", f"{method} not allowed"))
                return
            if method == "PATCH":
                ctype = self.headers.get("Content-Type", "")
                if ctype != "application/merge-patch+json":
                    # Custom resources take no strategic merge patch.
                    message = f"the body of the request was in an unknown format - {ctype}"
                    self._send(415, status_body(415, "UnsupportedMediaType", message))
                    return
            try:
                body = self._body()
            except ValueError as exc:
                self._send(400, status_body(400, "BadRequest", f"invalid JSON: {exc}"))
                return
            validation = query.get("fieldValidation") or "Warn"
            code, answer, warnings = api.write_custom(served, method, name, body, validation)
            written = (answer.get("metadata") or {}).get("name") or name or ""
            with api.lock:
                api.custom_writes.append((time.monotonic(), method, written, code))
                api.warnings += warnings
                if code >= 400:
                    api.refusals.append(answer)
            self._send(code, answer, [f'299 - "{w}"' for w in warnings])

        def _node(self, method: str, name: str) -> None:
            if method == "GET":
                with api.lock:
                    node = copy.deepcopy(api.nodes.get(name))
                if node is None:
                    self._not_found(f'nodes "{name}"')
                else:
                    self._send(200, node)
                return
            ctype = self.headers.get("Content-Type", "")
            if ctype not in (
                "application/merge-patch+json",
                "application/strategic-merge-patch+json",
            ):
                self._send(415, status_body(415, "UnsupportedMediaType", f"not supported: {ctype}"))
                return
            patch = self._body()
            with api.lock:
                if api.fail_patches > 0:
                    api.fail_patches -= 1
                    self._send(500, status_body(500, "InternalError", "injected failure"))
                    return
            node = api.patch_node(name, patch)
            if node is None:
                self._not_found(f'nodes "{name}"')
            else:
                self._send(200, node)

        def _configmaps(self, namespace: str, query: dict[str, str]) -> None:
            if query.get("watch") not in ("1", "true", "True"):
                self._send(200, api.list_configmaps(namespace))
                return
            w, replay = api.open_watch(namespace, query.get("resourceVersion"))
            bookmarks = query.get("allowWatchBookmarks") in ("1", "true", "True")
            timeout = float(query.get("timeoutSeconds") or 1800)
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            try:
                for event in replay:
                    self._chunk(event)
                if w is None:
                    self._end()
                    return
                self._stream(w, bookmarks, time.monotonic() + timeout)
            except OSError:
                self.close_connection = True
            finally:
                if w is not None:
                    api.close_watch(w)

        def _stream(self, w: Watch, bookmarks: bool, deadline: float) -> None:
            next_bookmark = time.monotonic() + api.BOOKMARK_SECONDS
            while True:
                now = time.monotonic()
                if now >= deadline:
                    self._end()  # the server's timeoutSeconds: a clean end of the stream
                    return
                try:
                    event = w.events.get(timeout=min(0.05, deadline - now))
                except queue.Empty:
                    if not api.closing.is_set():
                        if bookmarks and time.monotonic() >= next_bookmark:
                            self._bookmark()
                            next_bookmark = time.monotonic() + api.BOOKMARK_SECONDS
                        continue
                    event = None
                if event is None:
                    # expire() or stop(): the connection is cut, as when the server goes away.
                    self.close_connection = True
                    self.connection.shutdown(socket.SHUT_RDWR)
                    return
                self._chunk(event)

        def _bookmark(self) -> None:
            with api.lock:
                rv = str(api.rv)
            meta = {"resourceVersion": rv}
            self._chunk(
                {
                    "type": "BOOKMARK",
                    "object": {"kind": "ConfigMap", "apiVersion": "v1", "metadata": meta},
                }
            )

        def _chunk(self, event: dict[str, Any]) -> None:
            data = json.dumps(event).encode() + b"\n"
            self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
            self.wfile.flush()

        def _end(self) -> None:
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()

    return Handler
