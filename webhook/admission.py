"""AdmissionReview in, AdmissionReview out. Pure: bytes -> Result, no I/O.

The body is decoded by msgspec straight from the bytes into Structs, typed as a review of a pod
(`webhook.shapes`): only the fields the webhook reads are built (`oldObject`, `userInfo`, the
pod's volumes and so on are skipped), and types are never coerced. When that fails, a second,
looser reading
finds out why: a body that is not JSON, a review of something else (allowed unchanged), or a
body that is not an AdmissionReview the API server could have sent (HTTP 400 naming the field
as `request.object.spec.containers[0].name: field required`). A pod that must be refused is a
well-formed review with `allowed: false`.
"""

from __future__ import annotations

import json
import math
import re
from json.encoder import encode_basestring_ascii
from typing import Any, get_args

import msgspec

from resource_contract.keys import RESOURCES_KEY
from resource_contract.pod_annotation import Denial
from webhook.mutation import Mutator
from webhook.shapes import (
    _INT64,
    AnyReview,
    ApiVersion,
    ObjectMetaS,
    Operation,
    Pod,
    PodS,
    RequestS,
    ReviewKind,
    ReviewS,
    _RequestBase,
)

API_VERSIONS = ("admission.k8s.io/v1", "admission.k8s.io/v1beta1")
MUTATING_OPERATIONS = ("CREATE", "UPDATE")

_REVIEW = msgspec.json.Decoder(ReviewS)
_JSON = msgspec.json.Decoder()


class BadRequest(ValueError):
    """Not an AdmissionReview: HTTP 400 with `{"error": message}`."""


# msgspec's wording names its own types; users want to hear what JSON was expected.
_EXPECTED = {
    "object": "must be an object",
    "array": "must be an array",
    "str": "must be a string",
    "bool": "must be true or false",
}
# The choices of each Literal field, named as pydantic and the API server's docs name them.
_CHOICES = {
    "apiVersion": get_args(ApiVersion),
    "kind": get_args(ReviewKind),
    "operation": get_args(Operation),
}
_ERROR = re.compile(r"(?s)(?P<what>.*?)(?: - at `\$(?P<path>[^`]*)`)?")
_SEGMENT = re.compile(r"\.([^.\[]+)|\[(\d+|\.\.\.)\]")


def _is_quantity(value: Any) -> bool:
    if isinstance(value, bool):
        return False
    if isinstance(value, int):
        return -_INT64 < value < _INT64
    if isinstance(value, float):
        return math.isfinite(value)
    return isinstance(value, str)


def _quantity_message(value: Any) -> str:
    if isinstance(value, float) and not isinstance(value, bool):
        return "a quantity must be a finite number"
    if isinstance(value, int) and not isinstance(value, bool):
        return "a quantity must fit in 64 bits"
    return "a quantity must be a string or a number"


def _choices(options: tuple[str, ...]) -> str:
    quoted = [f"'{o}'" for o in options]
    return quoted[0] if len(quoted) == 1 else ", ".join(quoted[:-1]) + " or " + quoted[-1]


def describe(exc: msgspec.ValidationError, document: Any, prefix: str = "") -> str:
    """The problem as `field.path: what is wrong`. `document` is the decoded JSON the error
    was found in: a map's key that msgspec leaves out of its path (`[...]`) is found there."""
    match = _ERROR.fullmatch(str(exc))
    what, raw_path = (match["what"], match["path"] or "") if match else (str(exc), "")
    parts: list[str] = []
    node: Any = document
    quantity: Any = None
    for name, index in _SEGMENT.findall(raw_path):
        if name:
            parts.append(f".{name}" if parts or prefix else name)
            node = node.get(name) if isinstance(node, dict) else None
        elif index == "...":
            # A map's value: annotations hold strings, requests and limits quantities.
            in_quantities = parts[-1] in (".requests", ".limits") if parts else False
            bad = None
            if isinstance(node, dict):
                for key, value in node.items():
                    ok = _is_quantity(value) if in_quantities else isinstance(value, str)
                    if not ok:
                        bad = key
                        break
            parts.append(f".{bad}" if bad is not None else "[...]")
            if in_quantities and bad is not None:
                quantity = node[bad]
            node = node.get(bad) if isinstance(node, dict) and bad is not None else None
        else:
            parts.append(f"[{index}]")
            node = node[int(index)] if isinstance(node, list) and int(index) < len(node) else None
    where = prefix + "".join(parts)
    if quantity is not None or (parts and parts[-1] == "[...]" and "int | float | str" in what):
        return f"{where}: {_quantity_message(quantity)}"
    if not where:
        if what.startswith("Expected `object"):
            return "body: must be a JSON object (an AdmissionReview)"
        where = "body"
    missing = re.fullmatch(r"Object missing required field `([^`]*)`", what)
    if missing:
        field = missing[1] if where == "body" else f"{where}.{missing[1]}"
        return f"{field}: field required"
    expected = re.match(r"Expected `(\w+)(?: \| null)?`, got", what)
    if expected and expected[1] in _EXPECTED:
        return f"{where}: {_EXPECTED[expected[1]]}"
    if what.startswith("Expected `str` of length >= 1"):
        return f"{where}: must not be empty"
    field = parts[-1].lstrip(".") if parts else ""
    if what.startswith("Invalid enum value") and field in _CHOICES:
        return f"{where}: input should be {_choices(_CHOICES[field])}"
    return f"{where}: {what[:1].lower()}{what[1:]}"


def _read_json(body: bytes) -> Any:
    """The body as plain JSON values; BadRequest when it is not JSON. NaN and Infinity are
    read (as the API server never writes them, they end up refused as quantities or types)."""
    try:
        body.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise BadRequest(f"body: not valid JSON: invalid UTF-8 at byte {exc.start}") from None
    try:
        return _JSON.decode(body)
    except msgspec.DecodeError as exc:
        problem = str(exc).removeprefix("JSON is malformed: ")
    except RecursionError:
        raise BadRequest("body: not valid JSON: nested too deeply") from None
    try:
        return json.loads(body)
    except (ValueError, RecursionError):
        raise BadRequest(f"body: not valid JSON: {problem}") from None


def _non_finite_quantity(pod: Pod) -> str | None:
    """Where a NaN or infinite quantity is (only Python's JSON reader lets them through)."""
    spec: dict[str, Any] = dict(pod["spec"])
    for field in ("containers", "initContainers"):
        for i, container in enumerate(spec.get(field) or ()):
            resources = container.get("resources") or {}
            for part in ("requests", "limits"):
                for name, value in (resources.get(part) or {}).items():
                    if isinstance(value, float) and not math.isfinite(value):
                        return f"spec.{field}[{i}].resources.{part}.{name}"
    return None


def check_pod(obj: Any) -> Pod:
    """The pod's readable part; BadRequest naming the field for a shape no API server sends."""
    if obj is None:
        raise BadRequest("request.object: must be an object (the pod)")
    try:
        pod = msgspec.convert(obj, Pod, strict=True)
    except msgspec.ValidationError as exc:
        raise BadRequest(describe(exc, obj, "request.object")) from None
    where = _non_finite_quantity(pod)
    if where is not None:
        raise BadRequest(f"request.object.{where}: a quantity must be a finite number")
    return pod


def is_pod(request: _RequestBase) -> bool:
    resource, kind = request["resource"], request["kind"]
    return (
        resource.get("group", "") == ""
        and resource["resource"] == "pods"
        and kind.get("group", "") == ""
        and kind["kind"] == "Pod"
        and not request.get("subResource")
    )


def is_ours(request: _RequestBase) -> bool:
    """Pods, created or updated; the webhook never blocks anything else."""
    return request["operation"] in MUTATING_OPERATIONS and is_pod(request)


def _ours(request: RequestS) -> bool:
    """`is_ours` for a decoded request."""
    resource, kind = request.resource, request.kind
    return (
        request.operation in MUTATING_OPERATIONS
        and resource.resource == "pods"
        and resource.group == ""
        and kind.kind == "Pod"
        and kind.group == ""
        and not request.subResource
    )


def parse(body: bytes) -> ReviewS:
    """The review; its `request.object` is the pod when `_ours(request)`, else None."""
    if not body or body.isspace():
        raise BadRequest("body: empty; expected an AdmissionReview")
    try:
        review = _REVIEW.decode(body)
        if body.isascii() or _valid_utf8(body):
            return review
    except (msgspec.ValidationError, msgspec.DecodeError, UnicodeDecodeError, RecursionError):
        pass
    # Slow path: find out whether the body is no JSON, no review, a review of something else,
    # or a review of a pod that no API server would send.
    document = _read_json(body)
    try:
        loose = msgspec.convert(document, AnyReview, strict=True)
    except msgspec.ValidationError as exc:
        raise BadRequest(describe(exc, document)) from None
    request = loose["request"]
    pod: PodS | None = None
    if is_ours(request):
        check_pod(request.get("object"))  # raises when it is wrong
        # Read as the Structs read it (what check_pod accepted, they accept).
        pod = msgspec.convert(request["object"], PodS, strict=True)
    fields = {k: v for k, v in request.items() if k != "object"}
    decoded = msgspec.convert(fields, RequestS, strict=True)
    decoded.object = pod
    return ReviewS(loose["apiVersion"], loose["kind"], decoded)


def _valid_utf8(body: bytes) -> bool:
    """msgspec checks the strings it keeps, not those in the fields it skips."""
    try:
        body.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


_HEADS = {
    v: b'{"apiVersion":"' + v.encode() + b'","kind":"AdmissionReview","response":{"uid":'
    for v in API_VERSIONS
}
_PATCHED = b',"allowed":true,"patchType":"JSONPatch","patch":"'
_STATUS_REASONS = {400: "BadRequest", 403: "Forbidden", 500: "InternalError"}


def response(
    api_version: str,
    uid: str,
    *,
    allowed: bool = True,
    patch_b64: bytes | None = None,
    code: int | None = None,
    message: str | None = None,
    warnings: list[str] | None = None,
) -> bytes:
    if allowed and code is None and not warnings and api_version in _HEADS:
        # The answer to nearly every review, put together from bytes: json.dumps over the
        # nested dict costs more than everything else in the answer.
        head, quoted = _HEADS[api_version], encode_basestring_ascii(uid).encode()
        if patch_b64:
            return b"".join((head, quoted, _PATCHED, patch_b64, b'"}}'))  # one copy
        return head + quoted + b',"allowed":true}}'
    answer: dict[str, Any] = {"uid": uid, "allowed": allowed}
    if patch_b64:
        answer["patchType"] = "JSONPatch"
        answer["patch"] = patch_b64.decode("ascii")
    if code is not None:
        # metav1.Status: the API server shows `message` to the user who created the pod.
        answer["status"] = {
            "status": "Success" if allowed else "Failure",
            "code": code,
            "reason": _STATUS_REASONS.get(code, ""),
            "message": message or "",
        }
    if warnings:
        answer["warnings"] = warnings
    review = {"apiVersion": api_version, "kind": "AdmissionReview", "response": answer}
    return json.dumps(review, separators=(",", ":")).encode()


class Result(msgspec.Struct):
    """What the HTTP layer sends, and what it logs and counts (a Struct: made in C, about a
    third of what a dataclass's `__init__` costs)."""

    status: int
    body: bytes
    outcome: str  # patched, unchanged, ignored, denied, invalid, too_large, error
    reason: str | None = None  # why it was refused, for metrics
    message: str | None = None
    uid: str | None = None
    operation: str | None = None
    namespace: str | None = None
    pod: str | None = None
    error: BaseException | None = None  # an unexpected exception, for the log


def error_body(message: str) -> bytes:
    return json.dumps({"error": message}).encode()


def bad_request(message: str, status: int = 400) -> Result:
    return Result(status, error_body(message), "invalid", message=message)


_NO_METADATA = ObjectMetaS()


def _pod_name(request: RequestS, metadata: ObjectMetaS) -> str | None:
    generate = metadata.generateName
    return request.name or metadata.name or (f"{generate}*" if generate else None)


REPLACED_WARNING = (
    f"annotation {RESOURCES_KEY} is written by the resource-enforcer webhook; "
    "the value in the pod was replaced"
)


def review(body: bytes, mutator: Mutator) -> Result:
    """Answers one AdmissionReview. Never raises."""
    try:
        parsed = parse(body)
    except BadRequest as exc:
        return bad_request(str(exc))
    except Exception as exc:  # a body that could not even be read; still the client's
        return bad_request(f"body: cannot be read as an AdmissionReview: {exc}")
    api_version, request = parsed.apiVersion, parsed.request
    uid, operation = request.uid, request.operation
    if not _ours(request):
        # Other kinds, subresources, DELETE, CONNECT: allowed unchanged.
        body = response(api_version, uid)
        return Result(200, body, "ignored", None, None, uid, operation, request.namespace)
    pod = request.object
    if pod is None:
        return bad_request("request.object: must be an object (the pod)")
    metadata = pod.metadata or _NO_METADATA
    namespace = request.namespace or metadata.namespace or "default"
    result = Result(200, b"", "ignored", None, None, uid, operation, namespace)
    result.pod = _pod_name(request, metadata)
    if operation == "UPDATE" and metadata.deletionTimestamp:
        # A pod on its way out (finalizers being removed): never hold it up.
        result.body = response(api_version, uid)
        return result
    try:
        mutation = mutator.mutate_decoded(pod, namespace)
    except Denial as denial:
        result.outcome, result.reason, result.message = "denied", denial.reason, denial.message
        result.body = response(
            api_version, uid, allowed=False, code=denial.code, message=denial.message
        )
        return result
    except Exception as exc:
        # A bug of ours. With failurePolicy Fail the API server would refuse the pod on a
        # failed call anyway; a denial tells the user so, names the request for the logs,
        # and keeps the HTTP layer free of 500s.
        message = (
            f"internal error in the resource-enforcer webhook (request uid {uid}): "
            f"{type(exc).__name__}; see the webhook's logs"
        )
        result.outcome, result.reason, result.message = "error", "internal", message
        result.error = exc
        result.body = response(api_version, uid, allowed=False, code=500, message=message)
        return result
    result.outcome = "patched" if mutation.patch_b64 is not None else "unchanged"
    result.body = response(
        api_version,
        uid,
        patch_b64=mutation.patch_b64,
        warnings=[REPLACED_WARNING] if mutation.replaced is not None else None,
    )
    return result
