"""The AdmissionReview as the webhook reads it: msgspec types for the fields it uses.

Two spellings of one shape. The Structs are what every review is decoded into: msgspec builds
only the fields named here and skips the rest of the review in C. The TypedDicts accept
exactly the same documents (absent and null read alike as None; types are never coerced;
unknown fields are ignored, as newer API servers add some); the webhook uses them to say what
is wrong with a review the Structs refuse, and to read reviews of other kinds.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, NotRequired, TypedDict

import msgspec

_INT64 = 2**63

ApiVersion = Literal["admission.k8s.io/v1", "admission.k8s.io/v1beta1"]
ReviewKind = Literal["AdmissionReview"]
Operation = Literal["CREATE", "UPDATE", "DELETE", "CONNECT"]
NonEmpty = Annotated[str, msgspec.Meta(min_length=1)]

# A quantity as the API server writes it (a string), or a JSON number that fits in 64 bits.
Quantity = str | Annotated[int, msgspec.Meta(ge=-_INT64 + 1, le=_INT64 - 1)] | float


class GroupVersionKind(TypedDict):
    group: NotRequired[str]
    version: str
    kind: str


class GroupVersionResource(TypedDict):
    group: NotRequired[str]
    version: str
    resource: str


class Resources(TypedDict, total=False):
    requests: dict[str, Quantity] | None
    limits: dict[str, Quantity] | None


class Container(TypedDict):
    name: NonEmpty
    resources: NotRequired[Resources | None]
    restartPolicy: NotRequired[str | None]  # "Always": a sidecar (init containers)


class PodSpec(TypedDict):
    containers: list[Container]
    initContainers: NotRequired[list[Container] | None]
    resources: NotRequired[Resources | None]  # pod-level resources


class ObjectMeta(TypedDict, total=False):
    name: str | None
    generateName: str | None
    namespace: str | None
    annotations: dict[str, str] | None
    deletionTimestamp: str | None


class Pod(TypedDict):
    """The part of a Pod the webhook reads."""

    metadata: NotRequired[ObjectMeta | None]
    spec: PodSpec


class _RequestBase(TypedDict):
    uid: NonEmpty
    kind: GroupVersionKind
    resource: GroupVersionResource
    subResource: NotRequired[str | None]
    name: NotRequired[str | None]
    namespace: NotRequired[str | None]
    operation: Operation


class PodRequest(_RequestBase):
    object: NotRequired[Pod | None]


class AnyRequest(_RequestBase):
    object: NotRequired[Any]


class PodReview(TypedDict):
    apiVersion: ApiVersion
    kind: ReviewKind
    request: PodRequest


class AnyReview(TypedDict):
    apiVersion: ApiVersion
    kind: ReviewKind
    request: AnyRequest


# The same shapes as Structs (what every review is decoded into). None is part of a cycle,
# so the garbage collector need not track them (gc=False).


class GroupVersionKindS(msgspec.Struct, gc=False):
    version: str
    kind: str
    group: str = ""


class GroupVersionResourceS(msgspec.Struct, gc=False):
    version: str
    resource: str
    group: str = ""


class ResourcesS(msgspec.Struct, gc=False):
    requests: dict[str, Quantity] | None = None
    limits: dict[str, Quantity] | None = None


class ContainerS(msgspec.Struct, gc=False):
    name: NonEmpty
    resources: ResourcesS | None = None
    restartPolicy: str | None = None


class PodSpecS(msgspec.Struct, gc=False):
    containers: list[ContainerS]
    initContainers: list[ContainerS] | None = None
    resources: ResourcesS | None = None


class ObjectMetaS(msgspec.Struct, gc=False):
    name: str | None = None
    generateName: str | None = None
    namespace: str | None = None
    annotations: dict[str, str] | None = None
    deletionTimestamp: str | None = None


class PodS(msgspec.Struct, gc=False):
    """The part of a Pod the webhook reads."""

    spec: PodSpecS
    metadata: ObjectMetaS | None = None


class RequestS(msgspec.Struct, gc=False):
    uid: NonEmpty
    kind: GroupVersionKindS
    resource: GroupVersionResourceS
    operation: Operation
    subResource: str | None = None
    name: str | None = None
    namespace: str | None = None
    object: PodS | None = None


class ReviewS(msgspec.Struct, gc=False):
    apiVersion: ApiVersion
    kind: ReviewKind
    request: RequestS
