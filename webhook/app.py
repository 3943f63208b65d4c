"""The HTTP shell: FastAPI routes around the pure `webhook.admission.review`.

The admission routes are plain ASGI endpoints mounted in FastAPI's router: they read the body
with a size cap, answer bytes built by `review`, and skip the request/response objects and
dependency solving that the other routes get, since every pod in the cluster passes here.
A review over `LARGE_BODY` bytes is read only while one of `LARGE_SLOTS` is free and answered on
a worker thread, so a pod with thousands of containers neither holds up the small reviews on
the event loop nor, many at once, the process's memory.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, MutableMapping
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response
from starlette.routing import Route

from resource_contract.config import Config
from webhook.admission import Result, bad_request, review
from webhook.cache import DEFAULT_CACHE_BYTES
from webhook.metrics import CONTENT_TYPE, Metrics
from webhook.mutation import Mutator, Policy

log = logging.getLogger("webhook.admission")

# The API server refuses objects over 3 MiB (etcd's limit is lower still); a review above
# that is not from it.
MAX_BODY = 3 * 1024 * 1024
# A client that announced a too-large body and is sending it anyway gets it read and dropped
# up to this size before the 413, so it sees the answer rather than a reset connection.
_DRAIN_LIMIT = 16 * 1024 * 1024
# Reviews above this size (a few hundred containers) are decoded and patched on a worker
# thread; a typical review is 4 KB and takes ~50 us, a 3 MiB one a second or more.
LARGE_BODY = 64 * 1024
# How many large bodies may be read, queued or worked on at once: each costs its bytes and,
# while decoded, several times that. The rest wait, unread (the transport stops reading).
LARGE_SLOTS = 2

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]

_JSON_HEADERS = [(b"content-type", b"application/json")]


def too_large(size: str) -> Result:
    result = bad_request(f"body: {size} is over the limit of {MAX_BODY} bytes (3 MiB)", 413)
    result.outcome = "too_large"
    return result


async def _drain(receive: Receive, already: int) -> None:
    size = already
    while size <= _DRAIN_LIMIT:
        message = await receive()
        if message["type"] != "http.request":
            return
        size += len(message.get("body", b""))
        if not message.get("more_body"):
            return


class LargeBodies:
    """The slots that large bodies take while read, queued and answered, and the one worker
    thread that answers them."""

    def __init__(self, slots: int = LARGE_SLOTS) -> None:
        self.slots = asyncio.Semaphore(slots)
        self.worker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="large-review")


async def read_body(
    scope: Scope, receive: Receive, large: LargeBodies | None = None
) -> bytes | Result | None:
    """The request body, a Result to answer instead (400/413), or None if the client left.
    With `large`, a body over LARGE_BODY is read only while holding one of its slots (the
    caller releases it)."""
    declared: int | None = None
    expects_continue = False
    for name, value in scope["headers"]:
        if name == b"content-length":
            try:
                declared = int(value)
            except ValueError:
                return bad_request(f"content-length: {value.decode('latin-1')!r} is not a number")
        elif name == b"expect":
            expects_continue = value.lower() == b"100-continue"
    if declared is not None and declared > MAX_BODY:
        # A client waiting for "100 Continue" never sends the body: answer straight away.
        if not expects_continue and declared <= _DRAIN_LIMIT:
            await _drain(receive, 0)
        return too_large(f"content-length {declared}")
    held = False
    if large is not None and declared is not None and declared > LARGE_BODY:
        await large.slots.acquire()
        held = True
    try:
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] != "http.request":
                return None
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > MAX_BODY:
                # Chunked, or a Content-Length that lied: stop keeping it at the limit.
                if message.get("more_body"):
                    await _drain(receive, size)
                return too_large("the body")
            chunks.append(chunk)
            if large is not None and not held and size > LARGE_BODY:
                await large.slots.acquire()  # chunked: known to be large only now
                held = True
            if not message.get("more_body"):
                body = chunks[0] if len(chunks) == 1 else b"".join(chunks)
                if held:
                    held = False  # handed to the caller with the body
                return body
    finally:
        if held:
            large.slots.release()  # type: ignore[union-attr]


_ROUTINE = frozenset(("patched", "unchanged", "ignored"))


def _log(result: Result, seconds: float) -> None:
    if result.outcome in _ROUTINE and not log.isEnabledFor(logging.DEBUG):
        return
    fields: dict[str, Any] = {
        "uid": result.uid,
        "operation": result.operation,
        "namespace": result.namespace,
        "pod": result.pod,
        "outcome": result.outcome,
        "status": result.status,
        "latency_ms": round(seconds * 1000, 3),
    }
    if result.reason is not None:
        fields["reason"] = result.reason
    if result.message is not None:
        fields["message"] = result.message
    if result.error is not None:
        log.error(
            "admission failed",
            exc_info=(type(result.error), result.error, result.error.__traceback__),
            extra={"fields": fields},
        )
    elif result.outcome in ("denied", "invalid", "too_large"):
        log.warning("admission refused", extra={"fields": fields})
    else:
        # Every admission, at debug: at info a busy cluster's log would be mostly this line,
        # and the record alone costs a third of an admission.
        log.debug("admission", extra={"fields": fields})


class AdmissionEndpoint:
    """`POST /mutate` and `POST /` as a raw ASGI app."""

    def __init__(self, mutator: Mutator, metrics: Metrics) -> None:
        self.mutator = mutator
        self.metrics = metrics
        self.large = LargeBodies()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        start = time.perf_counter()
        body = await read_body(scope, receive, self.large)
        if body is None:
            return  # the client went away; nobody to answer
        if isinstance(body, bytes) and len(body) > LARGE_BODY:
            try:  # read_body handed over a slot with the body
                loop = asyncio.get_running_loop()
                result = await loop.run_in_executor(self.large.worker, self._review, body)
            finally:
                self.large.slots.release()
            del body
        else:
            result = body if isinstance(body, Result) else self._review(body)
        seconds = time.perf_counter() - start
        self.metrics.observe(result, seconds)
        if result.outcome not in _ROUTINE or log.isEnabledFor(logging.DEBUG):
            _log(result, seconds)
        headers = [*_JSON_HEADERS, (b"content-length", str(len(result.body)).encode())]
        if result.status == 413:
            headers.append((b"connection", b"close"))
        await send({"type": "http.response.start", "status": result.status, "headers": headers})
        await send({"type": "http.response.body", "body": result.body})

    def _review(self, body: bytes) -> Result:
        try:
            return review(body, self.mutator)
        except Exception as exc:  # review() never raises; a belt for the braces
            result = bad_request(f"internal error: {type(exc).__name__}")
            result.outcome, result.error = "error", exc
            return result


def _warm_up(mutator: Mutator) -> None:
    """Pays the first-call costs (the quantity parser's import, the decoders) before
    the first pod, so the first admission is as fast as the rest."""
    pod = {
        "metadata": {"name": "warm-up"},
        "spec": {"containers": [{"name": "c", "resources": {"limits": {"cpu": "1"}}}]},
    }
    review(
        json.dumps(
            {
                "apiVersion": "admission.k8s.io/v1",
                "kind": "AdmissionReview",
                "request": {
                    "uid": "warm-up",
                    "kind": {"group": "", "version": "v1", "kind": "Pod"},
                    "resource": {"group": "", "version": "v1", "resource": "pods"},
                    "operation": "CREATE",
                    "namespace": "default",
                    "object": pod,
                },
            }
        ).encode(),
        Mutator(mutator.policy, cache_bytes=0),
    )


ADMISSION_PATHS = ("/mutate", "/")


class WebhookApp(FastAPI):
    """FastAPI, with the admission routes answered before the middleware stack and router.

    Every pod in the cluster passes through `POST /mutate`; Starlette's middleware and route
    matching cost more than the admission itself (~50 us against ~20 us), so those requests go
    straight to their endpoint. Everything else (probes, metrics, 404, 405) is plain FastAPI.
    """

    admission: AdmissionEndpoint

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if (
            scope["type"] == "http"
            and scope["method"] == "POST"
            and scope["path"] in ADMISSION_PATHS
        ):
            await self.admission(scope, receive, send)
            return
        await super().__call__(scope, receive, send)


def create_app(
    config: Config | None = None,
    *,
    metrics: Metrics | None = None,
    cache_bytes: int = DEFAULT_CACHE_BYTES,
) -> WebhookApp:
    """The webhook app. `config` is the enforcer's configuration (class names, classAccess,
    preferenceAccess), read once by the caller; None accepts any well-formed class name and
    any valid preference. `cache_bytes` bounds the memoized annotations and patches."""
    mutator = Mutator(Policy.from_config(config), cache_bytes=cache_bytes)
    metrics = metrics if metrics is not None else Metrics()
    _warm_up(mutator)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        app.state.ready = True
        yield
        app.state.ready = False  # draining: let the Service stop sending us new reviews

    app = WebhookApp(
        title="resource-webhook",
        docs_url=None,
        redoc_url=None,
        openapi_url=None,
        lifespan=lifespan,
    )
    app.state.ready = False
    app.state.mutator = mutator
    app.state.metrics = metrics
    app.admission = AdmissionEndpoint(mutator, metrics)
    # Also in the router, so the routes are listed and other methods on them get a 405.
    app.router.routes[:0] = [
        Route("/mutate", app.admission, methods=["POST"], name="mutate"),
        Route("/", app.admission, methods=["POST"], name="mutate-root"),
    ]

    @app.get("/healthz")
    async def healthz() -> Response:
        return Response(b"ok\n", media_type="text/plain")

    @app.get("/readyz")
    async def readyz(request: Request) -> Response:
        if request.app.state.ready:
            return Response(b"ready\n", media_type="text/plain")
        return Response(b"not ready\n", status_code=503, media_type="text/plain")

    @app.get("/metrics")
    async def prometheus() -> Response:
        return Response(metrics.exposition(), media_type=CONTENT_TYPE)

    async def internal_error(request: Request, exc: Exception) -> Response:
        # Only the small GET routes get here (admission answers every failure itself).
        # 503, not 500: "this replica cannot answer now" is what a probe should hear.
        logging.getLogger("webhook").exception(
            "request failed", extra={"fields": {"path": request.url.path}}
        )
        return JSONResponse({"error": f"internal error: {type(exc).__name__}"}, status_code=503)

    app.add_exception_handler(Exception, internal_error)
    return app
