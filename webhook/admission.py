"""AdmissionReview in, AdmissionReview out. Pure: bytes -> Result, no I/O.

The body is checked by pydantic straight from the bytes into plain dicts, typed as a review of
a pod: only the fields the webhook reads are built (`oldObject`, `userInfo`, the pod's volumes
and so on are skipped). When that fails, a second, looser reading finds out why: a review of
something else (allowed unchanged), or a body that is not an AdmissionReview the API server
could have sent (HTTP 400 naming the field). A pod that must be refused is a well-formed
review with `allowed: false`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from json.encoder import encode_basestring_ascii
from typing import Annotated, Any, Literal, NotRequired

from pydantic import ConfigDict, Field, TypeAdapter, ValidationError, with_config

# pydantic needs typing_extensions.TypedDict before Python 3.12.
from typing_extensions import TypedDict

from resource_contract.keys import RESOURCES_KEY
from resource_contract.pod_annotation import Denial
from webhook.mutation import Mutator

API_VERSIONS = ("admission.k8s.io/v1", "admission.k8s.io/v1beta1")
MUTATING_OPERATIONS = ("CREATE", "UPDATE")
_INT64 = 2**63

# Unknown fields are ignored (newer API servers add some); types are never coerced.
_STRICT = ConfigDict(extra="ignore", strict=True)

ApiVersion = Literal["admission.k8s.io/v1", "admission.k8s.io/v1beta1"]
Operation = Literal["CREATE", "UPDATE", "DELETE", "CONNECT"]
NonEmpty = Annotated[str, Field(min_length=1)]


# A quantity as the API server writes it (a string), or a JSON number; checked in pydantic's
# core (a Python validator here would cost a third of the parse). Strict: true is no number.
Quantity = (
    str
    | Annotated[int, Field(gt=-_INT64, lt=_INT64)]
    | Annotated[float, Field(allow_inf_nan=False)]
)
_QUANTITY_TAGS = frozenset(("str", "int", "float", "constrained-int", "constrained-float"))


@with_config(_STRICT)
class GroupVersionKind(TypedDict):
    group: NotRequired[str]
    version: str
    kind: str


@with_config(_STRICT)
class GroupVersionResource(TypedDict):
    group: NotRequired[str]
    version: str
    resource: str


@with_config(_STRICT)
class Resources(TypedDict, total=False):
    requests: dict[str, Quantity] | None
    limits: dict[str, Quantity] | None


@with_config(_STRICT)
class Container(TypedDict):
    name: NonEmpty
    resources: NotRequired[Resources | None]


@with_config(_STRICT)
class PodSpec(TypedDict):
    containers: list[Container]
    initContainers: NotRequired[list[Container] | None]


@with_config(_STRICT)
class ObjectMeta(TypedDict, total=False):
    name: str | None
    generateName: str | None
    namespace: str | None
    annotations: dict[str, str] | None
    deletionTimestamp: str | None


@with_config(_STRICT)
class Pod(TypedDict):
    """The part of a Pod the webhook reads."""

    metadata: NotRequired[ObjectMeta | None]
    spec: PodSpec


@with_config(_STRICT)
class _RequestBase(TypedDict):
    uid: NonEmpty
    kind: GroupVersionKind
    resource: GroupVersionResource
    subResource: NotRequired[str | None]
    name: NotRequired[str | None]
    namespace: NotRequired[str | None]
    operation: Operation


@with_config(_STRICT)
class PodRequest(_RequestBase):
    object: NotRequired[Pod | None]


@with_config(_STRICT)
class AnyRequest(_RequestBase):
    object: NotRequired[Any]


@with_config(_STRICT)
class PodReview(TypedDict):
    apiVersion: ApiVersion
    kind: Literal["AdmissionReview"]
    request: PodRequest


@with_config(_STRICT)
class AnyReview(TypedDict):
    apiVersion: ApiVersion
    kind: Literal["AdmissionReview"]
    request: AnyRequest


_POD_REVIEW: TypeAdapter[PodReview] = TypeAdapter(PodReview)
_ANY_REVIEW: TypeAdapter[AnyReview] = TypeAdapter(AnyReview)
_POD: TypeAdapter[Pod] = TypeAdapter(Pod)


class BadRequest(ValueError):
    """Not an AdmissionReview: HTTP 400 with `{"error": message}`."""


# pydantic's wording names its own types; users want to hear what JSON was expected.
_MESSAGES = {
    "missing": "field required",
    "model_type": "must be an object",
    "model_attributes_type": "must be an object",
    "dict_type": "must be an object",
    "list_type": "must be an array",
    "string_type": "must be a string",
    "bool_type": "must be true or false",
    "string_too_short": "must not be empty",
}


def _where(prefix: str, loc: tuple[int | str, ...]) -> str:
    out = prefix
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
    return out or "body"


def _quantity_problem(errors: list[Any]) -> tuple[tuple[Any, ...], str, int] | None:
    """A bad quantity fails each member of the str | int | float union, one error each
    (located `...requests.cpu.str`, `....int`, `....float`): report it once."""
    loc = errors[0]["loc"]
    if not (len(loc) >= 3 and loc[-1] in _QUANTITY_TAGS and loc[-3] in ("requests", "limits")):
        return None
    same = [e for e in errors if e["loc"][:-1] == loc[:-1]]
    kinds = {e["type"] for e in same}
    if "finite_number" in kinds:
        message = "a quantity must be a finite number"
    elif kinds & {"greater_than", "less_than"}:
        message = "a quantity must fit in 64 bits"
    else:
        message = "a quantity must be a string or a number"
    return loc[:-1], message, len(errors) - len(same)


def describe(exc: ValidationError, prefix: str = "") -> str:
    """The first problem as `field.path: what is wrong` (and how many more there are)."""
    errors = exc.errors(include_url=False)
    first = errors[0]
    kind = first["type"]
    quantity = _quantity_problem(errors)
    if quantity is not None:
        loc, message, others = quantity
        more = f" (and {others} more problems)" if others else ""
        return f"{_where(prefix, loc)}: {message}{more}"
    if kind == "json_invalid":
        detail = first["msg"].removeprefix("Invalid JSON: ")
        return f"body: not valid JSON: {detail}"
    if not prefix and not first["loc"] and kind in ("dict_type", "model_type"):
        return "body: must be a JSON object (an AdmissionReview)"
    message = _MESSAGES.get(kind) or first["msg"].removeprefix("Value error, ")
    message = message[:1].lower() + message[1:]
    more = f" (and {len(errors) - 1} more problems)" if len(errors) > 1 else ""
    return f"{_where(prefix, first['loc'])}: {message}{more}"


def check_pod(obj: Any) -> Pod:
    """The pod's readable part; BadRequest naming the field for a shape no API server sends."""
    if obj is None:
        raise BadRequest("request.object: must be an object (the pod)")
    try:
        return _POD.validate_python(obj)
    except ValidationError as exc:
        raise BadRequest(describe(exc, "request.object")) from None


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


def parse(body: bytes) -> PodReview | AnyReview:
    """The review; its `request.object` is a checked Pod when `is_ours(request)`."""
    if not body or body.isspace():
        raise BadRequest("body: empty; expected an AdmissionReview")
    try:
        return _POD_REVIEW.validate_json(body)
    except ValidationError as typed:
        first_error = typed
    # Slow path: find out whether the body is no review, a review of something else, or a
    # review of a pod that no API server would send.
    try:
        review = _ANY_REVIEW.validate_json(body)
    except ValidationError as exc:
        raise BadRequest(describe(exc)) from None
    if is_ours(review["request"]):
        check_pod(review["request"].get("object"))
        raise BadRequest(describe(first_error))  # not reached while the two readings agree
    return review


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
    patch_b64: str | None = None,
    code: int | None = None,
    message: str | None = None,
    warnings: list[str] | None = None,
) -> bytes:
    if allowed and code is None and not warnings and api_version in _HEADS:
        # The answer to nearly every review, put together from bytes: json.dumps over the
        # nested dict costs more than everything else in the answer.
        head = _HEADS[api_version] + encode_basestring_ascii(uid).encode()
        if patch_b64:
            return head + _PATCHED + patch_b64.encode() + b'"}}'
        return head + b',"allowed":true}}'
    answer: dict[str, Any] = {"uid": uid, "allowed": allowed}
    if patch_b64:
        answer["patchType"] = "JSONPatch"
        answer["patch"] = patch_b64
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


@dataclass(slots=True)
class Result:
    """What the HTTP layer sends, and what it logs and counts."""

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


def _pod_name(request: _RequestBase, metadata: ObjectMeta) -> str | None:
    generate = metadata.get("generateName")
    return request.get("name") or metadata.get("name") or (f"{generate}*" if generate else None)


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
    except Exception as exc:  # a body pydantic could not even read; still the client's
        return bad_request(f"body: cannot be read as an AdmissionReview: {exc}")
    api_version, request = parsed["apiVersion"], parsed["request"]
    uid = request["uid"]
    result = Result(200, b"", "ignored", uid=uid, operation=request["operation"])
    result.namespace = request.get("namespace")
    if not is_ours(request):
        # Other kinds, subresources, DELETE, CONNECT: allowed unchanged.
        result.body = response(api_version, uid)
        return result
    pod = request.get("object")
    if pod is None:
        return bad_request("request.object: must be an object (the pod)")
    metadata = pod.get("metadata") or {}
    result.pod = _pod_name(request, metadata)
    namespace = request.get("namespace") or metadata.get("namespace") or "default"
    result.namespace = namespace
    if request["operation"] == "UPDATE" and metadata.get("deletionTimestamp"):
        # A pod on its way out (finalizers being removed): never hold it up.
        result.body = response(api_version, uid)
        return result
    try:
        mutation = mutator.mutate(pod, namespace)
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
    result.outcome = "patched" if mutation.patch else "unchanged"
    result.body = response(
        api_version,
        uid,
        patch_b64=mutation.patch_b64,
        warnings=[REPLACED_WARNING] if mutation.replaced is not None else None,
    )
    return result
