"""Container affinity and anti-affinity annotations: the peers' syntax, parsed and checked.

A pod says which containers each of its containers wants close to (affinity) or away from
(anti-affinity), as YAML keyed by container name:

    resource-enforcer.dev/affinity: |
      app:
        - match: {key: name, operator: Equals, values: [cache]}
          weight: 5
        - scope: {key: namespace, operator: AlwaysTrue}       # the whole node
          match: {key: labels/app, operator: In, values: [db]}
    resource-enforcer.dev/anti-affinity: |
      app: [noisy]                                             # shorthand: pod containers

Without `scope` a rule looks at the pod's own containers. Weights default to 1 and lie in
[-1000, 1000]; an anti-affinity's weight is negated. For each kind the first key present
wins: ours, then `resource-policy.nri.io/...`, then `cri-resource-manager.intel.com/...`.
Pure: the policy evaluates the parsed rules against the containers it has placed.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from fnmatch import fnmatchcase
from typing import Any, NamedTuple

import yaml

from resource_contract.bounded import BoundError, Limits, load_yaml
from resource_contract.keys import DOMAIN, PEER_DOMAINS

AFFINITY_KEYS = tuple(f"{d}/affinity" for d in (DOMAIN, *PEER_DOMAINS))
ANTI_AFFINITY_KEYS = tuple(f"{d}/anti-affinity" for d in (DOMAIN, *PEER_DOMAINS))
OPERATORS = (
    "Equals",
    "NotEqual",
    "In",
    "NotIn",
    "Exists",
    "NotExists",
    "AlwaysTrue",
    "Matches",
    "MatchesNot",
    "MatchesAny",
    "MatchesNone",
)
_SIMPLE_KEYS = ("name", "namespace", "qosclass", "id")
_POD_KEYS = ("pod/name", "pod/namespace", "pod/qosclass", "pod/uid", "pod/id")
MAX_WEIGHT = 1000
MAX_ANNOTATION_BYTES = 64 << 10  # YAML is parsed, so the text is bounded first
MAX_RULES = 256  # per pod and kind
# The format nests 5 levels ({container: [{match: {values: [...]}}]}); aliases count as the
# values they repeat, so a short text never stands for more than a text of the bound could hold.
ANNOTATION_LIMITS = Limits(max_bytes=MAX_ANNOTATION_BYTES, max_depth=16, max_nodes=32 << 10)
_CONTAINER_NAME_LABEL = "io.kubernetes.container.name"


class AffinityError(ValueError):
    """An affinity annotation that must be refused; the message names the key and the spot."""


class Expression(NamedTuple):
    key: str
    operator: str
    values: tuple[str, ...] = ()


class AffinityTerm(NamedTuple):
    """One rule of one container: containers in `scope` matching `match` get `weight`."""

    weight: int
    match: Expression
    scope: Expression | None = None  # None: the container's own pod


class Subject(NamedTuple):
    """What a rule can ask about a container."""

    name: str
    namespace: str
    qos: str
    pod_name: str
    pod_uid: str
    labels: Mapping[str, str]

    def value(self, key: str) -> str | None:
        simple = {
            "name": self.name,
            "namespace": self.namespace,
            "qosclass": self.qos,
            "id": self.pod_uid + "/" + self.name,
            "pod/name": self.pod_name,
            "pod/namespace": self.namespace,
            "pod/qosclass": self.qos,
            "pod/uid": self.pod_uid,
            "pod/id": self.pod_uid,
        }
        if key in simple:
            return simple[key]
        label = key.removeprefix("pod/").removeprefix("labels/")
        if label == _CONTAINER_NAME_LABEL:
            return self.name  # kubelet's label on every container
        return self.labels.get(label)


def evaluate(expr: Expression, subject: Subject) -> bool:
    op, values = expr.operator, expr.values
    if op == "AlwaysTrue":
        return True
    value = subject.value(expr.key)
    if op == "Exists":
        return value is not None
    if op == "NotExists":
        return value is None
    text = value or ""
    if op == "Equals":
        return value is not None and text == values[0]
    if op == "NotEqual":
        return text != values[0]
    if op == "In":
        return value is not None and text in values
    if op == "NotIn":
        return text not in values
    if op == "Matches":
        return value is not None and fnmatchcase(text, values[0])
    if op == "MatchesNot":
        return not fnmatchcase(text, values[0])
    if op == "MatchesAny":
        return value is not None and any(fnmatchcase(text, v) for v in values)
    return not any(fnmatchcase(text, v) for v in values)  # MatchesNone


def weight_towards(terms: Collection[AffinityTerm], me: Subject, other: Subject) -> int:
    """The summed weight of `me`'s rules on `other` (positive: pull, negative: push)."""
    total = 0
    for term in terms:
        in_scope = (
            other.pod_uid == me.pod_uid if term.scope is None else evaluate(term.scope, other)
        )
        if in_scope and evaluate(term.match, other):
            total += term.weight
    return total


def _expression(data: Any, where: str) -> Expression:
    if not isinstance(data, dict):
        raise AffinityError(f"{where}: must be a mapping with key, operator and values")
    unknown = set(data) - {"key", "operator", "values"}
    if unknown:
        raise AffinityError(f"{where}: unknown field {sorted(unknown)[0]!r}")
    op = data.get("operator")
    if op not in OPERATORS:
        raise AffinityError(f"{where}.operator: {op!r} is not one of {', '.join(OPERATORS)}")
    key = data.get("key", "")
    if op != "AlwaysTrue" and (not isinstance(key, str) or not _known_key(key)):
        raise AffinityError(
            f"{where}.key: {key!r} is not one of {', '.join(_SIMPLE_KEYS + _POD_KEYS)}, "
            "labels/LABEL or pod/labels/LABEL"
        )
    values = data.get("values") or []
    if not isinstance(values, list) or not all(isinstance(v, str) for v in values):
        raise AffinityError(f"{where}.values: must be a list of strings")
    one = ("Equals", "NotEqual", "Matches", "MatchesNot")
    if op in one and len(values) != 1:
        raise AffinityError(f"{where}.values: {op} takes exactly one value")
    return Expression(str(key or ""), op, tuple(values))


def _known_key(key: str) -> bool:
    if key in _SIMPLE_KEYS or key in _POD_KEYS:
        return True
    for prefix in ("labels/", "pod/labels/"):
        if key.startswith(prefix) and len(key) > len(prefix):
            return True
    return False


def _weight(data: Any, where: str, sign: int) -> int:
    if data is None:
        return sign
    if isinstance(data, bool) or not isinstance(data, int):
        raise AffinityError(f"{where}.weight: must be an integer")
    if not -MAX_WEIGHT <= data <= MAX_WEIGHT:
        raise AffinityError(f"{where}.weight: {data} is outside [-{MAX_WEIGHT}, {MAX_WEIGHT}]")
    return data * sign


def parse_affinity(text: str, key: str, sign: int) -> dict[str, tuple[AffinityTerm, ...]]:
    """One annotation's value: container -> its rules. AffinityError naming the spot."""
    if len(text) > MAX_ANNOTATION_BYTES or len(text.encode()) > MAX_ANNOTATION_BYTES:
        raise AffinityError(f'annotation "{key}": longer than {MAX_ANNOTATION_BYTES} bytes')
    try:
        data = load_yaml(text, ANNOTATION_LIMITS)
    except BoundError as exc:
        raise AffinityError(f'annotation "{key}": {exc}') from None
    except yaml.YAMLError as exc:
        raise AffinityError(f'annotation "{key}": not valid YAML: {exc}') from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise AffinityError(f'annotation "{key}": must map container names to rules')
    out: dict[str, tuple[AffinityTerm, ...]] = {}
    count = 0
    for container, rules in data.items():
        where = f'annotation "{key}": {container}'
        if not isinstance(rules, list):
            raise AffinityError(f"{where}: must be a list of rules or of container names")
        terms = []
        for i, rule in enumerate(rules):
            count += 1
            if count > MAX_RULES:
                raise AffinityError(f'annotation "{key}": more than {MAX_RULES} rules')
            spot = f"{where}[{i}]"
            if isinstance(rule, str):  # shorthand: a container of the same pod
                terms.append(
                    AffinityTerm(sign, Expression("labels/" + _CONTAINER_NAME_LABEL, "In", (rule,)))
                )
                continue
            if not isinstance(rule, dict):
                raise AffinityError(f"{spot}: must be a container name or a rule")
            unknown = set(rule) - {"scope", "match", "weight"}
            if unknown:
                raise AffinityError(f"{spot}: unknown field {sorted(unknown)[0]!r}")
            if "match" not in rule:
                raise AffinityError(f"{spot}: a rule needs `match`")
            scope = _expression(rule["scope"], f"{spot}.scope") if "scope" in rule else None
            terms.append(
                AffinityTerm(
                    _weight(rule.get("weight"), spot, sign),
                    _expression(rule["match"], f"{spot}.match"),
                    scope,
                )
            )
        out[str(container)] = tuple(terms)
    return out


def resolve_affinity(annotations: Mapping[str, str], container: str) -> tuple[AffinityTerm, ...]:
    """Container's rules from both kinds (first key present of each). AffinityError."""
    terms: list[AffinityTerm] = []
    for keys, sign in ((AFFINITY_KEYS, 1), (ANTI_AFFINITY_KEYS, -1)):
        for key in keys:
            if key in annotations:
                terms.extend(parse_affinity(annotations[key], key, sign).get(container, ()))
                break
    return tuple(terms)


def validate_affinity_annotations(
    annotations: Mapping[str, str], containers: Collection[str] | None = None
) -> None:
    """Refuses a malformed affinity annotation, and (given the pod's containers) one that
    names a container the pod does not have."""
    for keys in (AFFINITY_KEYS, ANTI_AFFINITY_KEYS):
        for key in keys:
            if key not in annotations:
                continue
            parsed = parse_affinity(annotations[key], key, 1)
            if containers is not None:
                for name in parsed:
                    if name not in containers:
                        raise AffinityError(
                            f'annotation "{key}": the pod has no container "{name}" '
                            f"(its containers: {', '.join(containers)})"
                        )


def terms_to_data(terms: tuple[AffinityTerm, ...]) -> list[Any]:
    return [
        [t.weight, [*list(t.match[:2]), list(t.match.values)], _scope_data(t.scope)] for t in terms
    ]


def _scope_data(scope: Expression | None) -> Any:
    return None if scope is None else [scope.key, scope.operator, list(scope.values)]


def terms_from_data(data: Any) -> tuple[AffinityTerm, ...]:
    """The inverse of terms_to_data (a saved state); ValueError on anything else, which is
    never read as another rule."""
    if data is None:
        return ()
    if not isinstance(data, list):
        raise ValueError(f"affinity is {data!r}, not a list of rules")
    out = []
    for term in data:
        if not (isinstance(term, list) and len(term) == 3):
            raise ValueError(f"affinity rule {term!r} is not [weight, match, scope]")
        weight, match, scope = term
        if not (isinstance(weight, int) and not isinstance(weight, bool)) or not (
            -MAX_WEIGHT <= weight <= MAX_WEIGHT
        ):
            raise ValueError(
                f"affinity weight {weight!r} is not an integer from -{MAX_WEIGHT} to {MAX_WEIGHT}"
            )
        out.append(
            AffinityTerm(
                weight,
                _expression_from_data(match),
                None if scope is None else _expression_from_data(scope),
            )
        )
    return tuple(out)


def _expression_from_data(data: Any) -> Expression:
    if (
        isinstance(data, list)
        and len(data) == 3
        and isinstance(data[0], str)
        and data[1] in OPERATORS
        and isinstance(data[2], list)
        and all(isinstance(v, str) for v in data[2])
    ):
        return Expression(data[0], data[1], tuple(data[2]))
    raise ValueError(f"affinity expression {data!r} is not [key, operator, [values]]")
