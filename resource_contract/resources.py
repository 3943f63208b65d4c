"""The `resources` annotation: each container's requests and limits as the pod spec wrote them."""

from __future__ import annotations

import json
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from resource_contract.classes import ClassKind


class ResourcesAnnotationError(ValueError):
    pass


class ContainerResources(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    requests: dict[str, str] = Field(default_factory=dict)
    limits: dict[str, str] = Field(default_factory=dict)
    classes: dict[ClassKind, str] | None = None


class ResourcesAnnotation(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    containers: dict[str, ContainerResources] = Field(default_factory=dict)
    initContainers: dict[str, ContainerResources] = Field(default_factory=dict)

    def to_json(self) -> str:
        """Compact and deterministic (spec order), so a second admission writes the same bytes."""
        return json.dumps(self.model_dump(exclude_none=True), separators=(",", ":"))

    def get(self, container: str) -> ContainerResources | None:
        return self.containers.get(container) or self.initContainers.get(container)

    @classmethod
    def parse(cls, text: str, *, key: str) -> ResourcesAnnotation:
        """Parses the annotation `key`; the error names the key and the offending field."""
        try:
            data: Any = json.loads(text)
        except ValueError as exc:
            raise ResourcesAnnotationError(f'annotation "{key}": not valid JSON: {exc}') from None
        try:
            return cls.model_validate(data)
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(p) for p in first["loc"]) or "(top level)"
            raise ResourcesAnnotationError(f'annotation "{key}": {where}: {first["msg"]}') from None
