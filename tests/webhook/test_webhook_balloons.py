"""The webhook's checks of balloon-type annotations, as it checks class annotations: a
malformed or unknown type is a 400, a type the namespace may not use a 403, each naming the
annotation and what is allowed; and of affinity annotations (malformed, or naming a container
the pod does not have: 400)."""

from __future__ import annotations

import json
from typing import Any

import yaml
from wh_support import body, container, pod, review

from enforcer.configuration import parse_config
from webhook.admission import review as handle
from webhook.mutation import Mutator, Policy

BALLOONS_YAML = """
policy:
  name: balloons
  reservedCPUs: "0"
  balloonTypes:
    - name: inference
      namespaces: ["ai-*"]
      maxCPUs: 8
    - name: batch
classAccess:
  balloon:
    inference: ["ai-*", "ml"]
"""
BALLOONS = Mutator(Policy.from_config(parse_config(yaml.safe_load(BALLOONS_YAML))))
OPEN = Mutator(Policy())


def admit(annotations: dict[str, str], namespace: str, mutator: Mutator) -> tuple[Any, dict]:
    p = pod([container("app")], annotations=annotations, namespace=namespace)
    result = handle(body(review(p, namespace=namespace)), mutator)
    return result, json.loads(result.body)["response"]


def test_configured_type_in_an_allowed_namespace_is_admitted() -> None:
    for key in (
        "balloon.resource-enforcer.dev/container.app",
        "balloon.balloons.resource-policy.nri.io/pod",
        "balloon.balloons.resource-policy.nri.io",
    ):
        _, response = admit({key: "inference"}, "ml", BALLOONS)
        assert response["allowed"] is True, response


def test_unknown_type_is_refused_naming_the_configured_ones() -> None:
    result, response = admit(
        {"balloon.balloons.resource-policy.nri.io/container.app": "inferense"}, "ml", BALLOONS
    )
    assert (result.outcome, result.reason, response["status"]["code"]) == (
        "denied",
        "unknown",
        400,
    )
    message = response["status"]["message"]
    assert '"inferense"' in message and "reserved, inference, batch, default" in message


def test_type_the_namespace_may_not_use_is_forbidden() -> None:
    result, response = admit({"balloon.resource-enforcer.dev/pod": "inference"}, "web", BALLOONS)
    assert (result.reason, response["status"]["code"]) == ("forbidden", 403)
    assert 'namespace "web"' in response["status"]["message"]
    assert "ai-*, ml" in response["status"]["message"]


def test_reserved_type_follows_prefer_reserved_cpus_access() -> None:
    # By default only policy.reservedNamespaces (kube-system) may ask for reserved CPUs.
    _, response = admit({"balloon.resource-enforcer.dev/pod": "reserved"}, "web", BALLOONS)
    assert response["status"]["code"] == 403
    _, response = admit({"balloon.resource-enforcer.dev/pod": "reserved"}, "kube-system", BALLOONS)
    assert response["allowed"] is True


def test_malformed_type_is_refused_even_without_a_configuration() -> None:
    result, response = admit(
        {"balloon.balloons.resource-policy.nri.io/container.other": "../etc"}, "web", OPEN
    )
    assert (result.reason, response["status"]["code"]) == ("malformed", 400)
    # Without --config any well-formed type goes: the node checks it against its own.
    _, response = admit({"balloon.resource-enforcer.dev/pod": "anything"}, "web", OPEN)
    assert response["allowed"] is True


ANTI = "resource-policy.nri.io/anti-affinity"
AFF = "resource-policy.nri.io/affinity"


def test_webhook_refuses_malformed_affinity_and_unknown_containers() -> None:
    mutator = OPEN
    for value, message in (
        ("app: [{match: {key: name, operator: Near}}]", "operator"),
        ("ap: [db]", 'the pod has no container "ap"'),
    ):
        p = pod([container("app")], annotations={ANTI: value})
        result = handle(body(review(p)), mutator)
        response = json.loads(result.body)["response"]
        assert (result.reason, response["status"]["code"]) == ("affinity", 400)
        assert message in response["status"]["message"]
    ok = pod([container("app"), container("db")], annotations={AFF: "app: [db]"})
    assert json.loads(handle(body(review(ok)), mutator).body)["response"]["allowed"] is True
