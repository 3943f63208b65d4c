"""The `resources` annotation: each container's requests and limits as the pod spec wrote them."""

from __future__ import annotations

import json
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from resource_contract.bounded import json_depth
from resource_contract.classes import ClassKind

# Kubernetes caps all annotations of an object together at 256 KiB: one annotation cannot be
# bigger, so a longer value did not come through the API server and is refused unread.
MAX_BYTES = 256 * 1024
# The format nests objects 4 deep ({"containers": {NAME: {"requests": {RESOURCE: QUANTITY}}}}).
# Deeper nesting is refused by a linear scan before the JSON parser (which recurses) sees it;
# the margin lets a slightly wrong shape reach the schema, whose error names the field.
SCHEMA_DEPTH = 4
MAX_DEPTH = 2 * SCHEMA_DEPTH


class ResourcesAnnotationError(ValueError):
    pass


class ContainerResources(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    requests: dict[str, str] = Field(default_factory=dict)
    limits: dict[str, str] = Field(default_factory=dict)
    classes: dict[ClassKind, str] | None = None


class PodResources(BaseModel):
    """The pod's `spec.resources` (pod-level resources), quantities as the spec wrote them."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    requests: dict[str, str] = Field(default_factory=dict)
    limits: dict[str, str] = Field(default_factory=dict)


class ResourcesAnnotation(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    containers: dict[str, ContainerResources] = Field(default_factory=dict)
    initContainers: dict[str, ContainerResources] = Field(default_factory=dict)
    # Present only when the pod has pod-level resources.
    pod: PodResources | None = None

    def to_json(self) -> str:
        """Compact and deterministic (spec order), so a second admission writes the same bytes."""
        return json.dumps(self.model_dump(exclude_none=True), separators=(",", ":"))

    def get(self, container: str) -> ContainerResources | None:
        return self.containers.get(container) or self.initContainers.get(container)

    @classmethod
    def parse(cls, text: str, *, key: str) -> ResourcesAnnotation:
        """Parses the annotation `key`; the error names the key and the offending field.

        Size and depth are checked first, in time linear in a bounded length, so a hostile
        value costs no more than a well-formed one."""
        check_bounds(text, key=key)
        try:
            data: Any = json.loads(text)
        except RecursionError:  # not reached below MAX_DEPTH; kept as a second fence
            raise ResourcesAnnotationError(f'annotation "{key}": nested too deep') from None
        except ValueError as exc:
            raise ResourcesAnnotationError(f'annotation "{key}": not valid JSON: {exc}') from None
        try:
            return cls.model_validate(data)
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(p) for p in first["loc"]) or "(top level)"
            raise ResourcesAnnotationError(f'annotation "{key}": {where}: {first["msg"]}') from None


def check_bounds(text: str, *, key: str) -> None:
    """ResourcesAnnotationError when `text` is longer than MAX_BYTES (UTF-8) or nests objects
    and arrays deeper than MAX_DEPTH (brackets inside strings do not count)."""
    # A character is at most 4 bytes: only a short enough text is encoded to be measured.
    if len(text) > MAX_BYTES or len(text.encode("utf-8", "surrogatepass")) > MAX_BYTES:
        raise ResourcesAnnotationError(
            f'annotation "{key}": longer than {MAX_BYTES // 1024} KiB, the most Kubernetes '
            "allows for all of a pod's annotations"
        )
    depth = nesting_depth(text)
    if depth > MAX_DEPTH:
        raise ResourcesAnnotationError(
            f'annotation "{key}": nested {depth} levels deep; its format has {SCHEMA_DEPTH} '
            '({"containers": {NAME: {"requests": {RESOURCE: QUANTITY}}}})'
        )


def nesting_depth(text: str) -> int:
    """How deep JSON objects and arrays nest in `text`, strings skipped (the shared scan)."""
    return json_depth(text)
