"""A CustomResourceDefinition's structural schema applied as the API server applies it to a
custom object on create, update and patch: for the fake API server (tests/support).

What the real API server does, in its order (apiextensions-apiserver):

1. decoding: with `fieldValidation=Strict` a field the schema does not know is a 400 BadRequest
   ("strict decoding error: unknown field ..."); otherwise it is pruned, with a `Warning` header
   per field under `Warn` (the default since 1.27) and silently under `Ignore`;
2. defaulting is not used by this CRD (no `default` in its schema);
3. null values of fields that are not `nullable` are pruned;
4. validation against the OpenAPI v3 schema: `type`, `required`, `pattern`, `format` (int64),
   `anyOf`, `x-kubernetes-int-or-string`, `enum`, `items`, `properties`,
   `additionalProperties`; every problem is reported at once, as a 422 Invalid Status naming
   each field path (`zones[0].resources[1].capacity`), as `kubectl` shows them.

`metadata` is the API server's own ObjectMeta: the schema says only `type: object`; its name
and ownerReferences are checked here as the API server checks them.
"""

from __future__ import annotations

import copy
import re
from dataclasses import dataclass, field
from typing import Any

INT64 = (-(1 << 63), (1 << 63) - 1)
# metadata.name of a cluster-scoped custom object: a DNS subdomain (RFC 1123).
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_OWNER_FIELDS = ("apiVersion", "kind", "name", "uid")


@dataclass
class Cause:
    reason: str  # FieldValueRequired, FieldValueInvalid, FieldValueTypeInvalid, ...
    field: str
    message: str


@dataclass
class Checked:
    """The object as the API server would store it, and what it said about it."""

    obj: dict[str, Any]
    unknown: list[str] = field(default_factory=list)  # pruned fields, by path
    causes: list[Cause] = field(default_factory=list)  # validation errors (422)


def _type_of(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    if isinstance(value, dict):
        return "object"
    return type(value).__name__


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


class StructuralSchema:
    """One version's openAPIV3Schema."""

    def __init__(self, schema: dict[str, Any]) -> None:
        self.schema = schema

    # -- pruning (unknown fields, nulls) --------------------------------------------------------

    def _prune(self, value: Any, schema: dict[str, Any], path: str, unknown: list[str]) -> Any:
        if isinstance(value, dict) and (schema.get("type") == "object" or "properties" in schema):
            if path == "metadata" or schema.get("x-kubernetes-preserve-unknown-fields"):
                return value
            props = schema.get("properties")
            extra = schema.get("additionalProperties")
            out = {}
            for key, item in value.items():
                sub = props.get(key) if props is not None else None
                if sub is None and isinstance(extra, dict):
                    sub = extra
                if sub is None:
                    if props is None and extra is None:
                        out[key] = item  # a plain `type: object` with no fields declared
                    elif path == "" and key in ("apiVersion", "kind", "metadata"):
                        out[key] = item
                    else:
                        unknown.append(_join(path, key))
                    continue
                if item is None and not sub.get("nullable"):
                    continue  # nulls of non-nullable fields are pruned
                out[key] = self._prune(item, sub, _join(path, key), unknown)
            return out
        if isinstance(value, list) and isinstance(schema.get("items"), dict):
            return [
                self._prune(item, schema["items"], f"{path}[{i}]", unknown)
                for i, item in enumerate(value)
            ]
        return value

    # -- validation -----------------------------------------------------------------------------

    def _validate(self, value: Any, schema: dict[str, Any], path: str, out: list[Cause]) -> None:
        actual = _type_of(value)

        def bad(reason: str, message: str) -> None:
            out.append(Cause(reason, path, f"{path}: {message}"))

        if value is None:
            if not schema.get("nullable"):
                expected = schema.get("type", "object")
                bad(
                    "FieldValueTypeInvalid",
                    f'Invalid value: "null": {path} in body must be of type {expected}: "null"',
                )
            return
        if "anyOf" in schema and not any(self._fits(value, alt) for alt in schema["anyOf"]):
            bad("FieldValueInvalid", f'Invalid value: "{value}": {path} in body must match anyOf')
            return
        if schema.get("x-kubernetes-int-or-string") and actual not in ("integer", "string"):
            bad(
                "FieldValueTypeInvalid",
                f'Invalid value: "{actual}": {path} in body must be '
                f'of type integer,string: "{actual}"',
            )
            return
        expected = schema.get("type")
        if expected is not None and not (
            actual == expected or (expected == "number" and actual == "integer")
        ):
            bad(
                "FieldValueTypeInvalid",
                f'Invalid value: "{actual}": {path} in body must be of type {expected}: "{actual}"',
            )
            return
        if "enum" in schema and value not in schema["enum"]:
            bad(
                "FieldValueNotSupported",
                f"Unsupported value: {value!r}: supported values: {schema['enum']}",
            )
        if actual == "string" and "pattern" in schema and not re.search(schema["pattern"], value):
            bad(
                "FieldValueInvalid",
                f"Invalid value: \"{value}\": {path} in body should match '{schema['pattern']}'",
            )
        int64 = actual == "integer" and schema.get("format") == "int64"
        if int64 and not INT64[0] <= value <= INT64[1]:
            bad(
                "FieldValueInvalid", f"Invalid value: {value}: {path} in body must be of type int64"
            )
        if isinstance(value, dict):
            for key in schema.get("required", []):
                if key not in value:
                    where = _join(path, key)
                    out.append(Cause("FieldValueRequired", where, f"{where}: Required value"))
            props = schema.get("properties") or {}
            extra = schema.get("additionalProperties")
            for key, item in value.items():
                sub = props.get(key) or (extra if isinstance(extra, dict) else None)
                if sub is not None and not (path == "" and key == "metadata"):
                    self._validate(item, sub, _join(path, key), out)
        if isinstance(value, list) and isinstance(schema.get("items"), dict):
            for i, item in enumerate(value):
                self._validate(item, schema["items"], f"{path}[{i}]", out)

    def _fits(self, value: Any, schema: dict[str, Any]) -> bool:
        causes: list[Cause] = []
        self._validate(value, schema, "", causes)
        return not causes

    def check(self, obj: dict[str, Any]) -> Checked:
        """The object pruned as the server stores it, with its unknown fields and problems."""
        unknown: list[str] = []
        pruned = self._prune(copy.deepcopy(obj), self.schema, "", unknown)
        causes: list[Cause] = []
        self._validate(pruned, self.schema, "", causes)
        causes += check_metadata(pruned.get("metadata"))
        return Checked(pruned, unknown, causes)


def check_metadata(meta: Any) -> list[Cause]:
    """What the API server checks of a custom object's ObjectMeta (the parts used here)."""
    if not isinstance(meta, dict):
        return [
            Cause(
                "FieldValueRequired",
                "metadata.name",
                "metadata.name: Required value: name or generateName is required",
            )
        ]
    causes = []
    name = meta.get("name")
    if not name:
        causes.append(
            Cause(
                "FieldValueRequired",
                "metadata.name",
                "metadata.name: Required value: name or generateName is required",
            )
        )
    elif len(name) > 253 or not _DNS_SUBDOMAIN.match(name):
        causes.append(
            Cause(
                "FieldValueInvalid",
                "metadata.name",
                f"metadata.name: Invalid "
                f'value: "{name}": a lowercase RFC 1123 subdomain must consist of '
                "lower case alphanumeric characters, '-' or '.'",
            )
        )
    for i, ref in enumerate(meta.get("ownerReferences") or []):
        for key in _OWNER_FIELDS:
            if not isinstance(ref, dict) or not ref.get(key):
                where = f"metadata.ownerReferences[{i}].{key}"
                causes.append(
                    Cause(
                        "FieldValueInvalid",
                        where,
                        f'{where}: Invalid value: "": {key} must not be empty',
                    )
                )
    for key in ("labels", "annotations"):
        values = meta.get(key) or {}
        if not isinstance(values, dict) or not all(isinstance(v, str) for v in values.values()):
            causes.append(
                Cause(
                    "FieldValueTypeInvalid",
                    f"metadata.{key}",
                    f"metadata.{key}: must be a map of strings",
                )
            )
    return causes


@dataclass(frozen=True)
class CustomResource:
    """One served version of a CRD: where it is served and what it accepts."""

    group: str
    version: str
    plural: str
    kind: str
    namespaced: bool
    schema: StructuralSchema

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}"


def served_versions(crd: dict[str, Any]) -> list[CustomResource]:
    """Every served version of a CustomResourceDefinition (apiextensions.k8s.io/v1)."""
    if crd.get("apiVersion") != "apiextensions.k8s.io/v1" or crd.get("kind") != (
        "CustomResourceDefinition"
    ):
        raise ValueError("not an apiextensions.k8s.io/v1 CustomResourceDefinition")
    spec = crd["spec"]
    return [
        CustomResource(
            group=spec["group"],
            version=v["name"],
            plural=spec["names"]["plural"],
            kind=spec["names"]["kind"],
            namespaced=spec["scope"] == "Namespaced",
            schema=StructuralSchema(v["schema"]["openAPIV3Schema"]),
        )
        for v in spec["versions"]
        if v.get("served")
    ]
