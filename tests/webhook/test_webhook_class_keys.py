"""The mutation's class keys: dialects and precedence, and the denials (malformed or unknown
classes, forbidden classes and preferences, bad values), against the oracle of mutation_oracle."""

from __future__ import annotations

from typing import Any

import pytest
from mutation_oracle import CONFIGURED, OPEN, contract_keys, run
from wh_support import RESOURCES_KEY, annotation, container, pod

from resource_contract.pod_annotation import Denial
from webhook.mutation import Policy, mutate_pod

# --- class dialects and precedence -------------------------------------------------------------


@pytest.mark.parametrize("kind", ["rdt", "blockio"])
@pytest.mark.parametrize("level", range(8))
def test_each_dialect_is_read(kind: str, level: int) -> None:
    key = contract_keys(kind, "app")[level]
    out = annotation(run(pod([container("app"), container("side")], annotations={key: "gold"})))
    assert out["containers"]["app"]["classes"] == {kind: "gold"}
    # Pod-level keys reach every container; container keys only their own.
    assert ("classes" in out["containers"]["side"]) == key.endswith("/pod")


@pytest.mark.parametrize("kind", ["rdt", "blockio"])
@pytest.mark.parametrize("winner", range(8))
def test_first_key_in_contract_order_wins(kind: str, winner: int) -> None:
    keys = contract_keys(kind, "app")
    annotations = {key: f"class{i}" for i, key in enumerate(keys) if i >= winner}
    out = annotation(run(pod([container("app")], annotations=annotations)))
    assert out["containers"]["app"]["classes"] == {kind: f"class{winner}"}


def test_container_key_of_another_container_does_not_apply() -> None:
    out = annotation(
        run(
            pod(
                [container("app")],
                annotations={"rdtclass.resource-enforcer.dev/container.db": "gold"},
            )
        )
    )
    assert "classes" not in out["containers"]["app"]


def test_classes_only_when_something_resolved() -> None:
    out = annotation(run(pod([container("app")], annotations={"team": "x"})))
    assert out == {"containers": {"app": {"requests": {}, "limits": {}}}, "initContainers": {}}


def test_only_the_kinds_that_resolved() -> None:
    out = annotation(
        run(pod([container("app")], annotations={"blockioclass.resource-enforcer.dev/pod": "slow"}))
    )
    assert out["containers"]["app"]["classes"] == {"blockio": "slow"}


def test_qos_default_only_with_configuration() -> None:
    p = pod([container("app", {"cpu": "1", "memory": "1Gi"}, {"cpu": "1", "memory": "1Gi"})])
    assert "classes" not in annotation(run(p))["containers"]["app"]
    # Guaranteed is a configured RDT class; no block I/O class is named after a QoS class.
    assert annotation(run(p, CONFIGURED))["containers"]["app"]["classes"] == {"rdt": "Guaranteed"}
    besteffort = pod([container("app")])
    assert "classes" not in annotation(run(besteffort, CONFIGURED))["containers"]["app"]


# --- denials -----------------------------------------------------------------------------------


def deny(p: dict[str, Any], policy: Policy = OPEN, namespace: str = "shop") -> Denial:
    with pytest.raises(Denial) as info:
        mutate_pod(p, namespace=namespace, policy=policy)
    return info.value


@pytest.mark.parametrize("kind", ["rdt", "blockio"])
@pytest.mark.parametrize("level", range(8))
@pytest.mark.parametrize("bad", ["../etc", "-gold", "", "g" * 64, "a b", "system/default"])
def test_malformed_class_names_are_denied_in_every_dialect(kind: str, level: int, bad: str) -> None:
    key = contract_keys(kind, "app")[level]
    denial = deny(pod([container("app")], annotations={key: bad}))
    assert (denial.code, denial.reason) == (400, "malformed")
    assert key in denial.message and f'"{bad}"' in denial.message
    assert "^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$" in denial.message


def test_malformed_name_for_a_container_the_pod_lacks_is_denied() -> None:
    denial = deny(
        pod([container("app")], annotations={"rdtclass.resource-enforcer.dev/container.typo": "$$"})
    )
    assert denial.reason == "malformed"


def test_unknown_class_is_denied_with_the_configured_ones() -> None:
    denial = deny(
        pod([container("app")], annotations={"rdtclass.resource-enforcer.dev/pod": "platinum"}),
        CONFIGURED,
    )
    assert (denial.code, denial.reason) == (400, "unknown")
    assert "rdtclass.resource-enforcer.dev/pod" in denial.message and "platinum" in denial.message
    assert "Burstable, Guaranteed, gold, silver" in denial.message


def test_unknown_class_is_accepted_without_configuration() -> None:
    out = annotation(
        run(pod([container("app")], annotations={"rdtclass.resource-enforcer.dev/pod": "platinum"}))
    )
    assert out["containers"]["app"]["classes"] == {"rdt": "platinum"}


def test_class_the_namespace_may_not_use_is_forbidden() -> None:
    p = pod([container("app")], annotations={"rdt.resources.beta.kubernetes.io/pod": "gold"})
    denial = deny(p, CONFIGURED, namespace="dev")
    assert (denial.code, denial.reason) == (403, "forbidden")
    assert "rdt.resources.beta.kubernetes.io/pod" in denial.message and '"gold"' in denial.message
    assert "prod-*" in denial.message and "silver" in denial.message
    assert (
        annotation(run(p, CONFIGURED, namespace="prod-eu"))["containers"]["app"]["classes"]["rdt"]
        == "gold"
    )


@pytest.mark.parametrize("scope", ["pod", "container.app", "container.other"])
@pytest.mark.parametrize(
    "name", ["prefer-isolated-cpus", "prefer-shared-cpus", "prefer-reserved-cpus", "cpu.preserve"]
)
@pytest.mark.parametrize(
    "domain", ["resource-enforcer.dev", "resource-policy.nri.io", "cri-resource-manager.intel.com"]
)
def test_preference_values_other_than_true_false_are_denied(
    scope: str, name: str, domain: str
) -> None:
    key = f"{name}.{domain}/{scope}"
    for good in ("true", "false"):
        run(pod([container("app")], annotations={key: good}))
    denial = deny(pod([container("app")], annotations={key: "yes"}))
    assert (denial.code, denial.reason) == (400, "preference")
    assert (
        key in denial.message
        and '"yes"' in denial.message
        and '"true" or "false"' in denial.message
    )


@pytest.mark.parametrize(
    ("key", "allowed_in", "globs"),
    [
        ("cpu.preserve.resource-enforcer.dev/container.app", "kube-system", "kube-system"),
        ("cpu.preserve.resource-policy.nri.io/pod", "kube-system", "kube-system"),
        ("prefer-reserved-cpus.cri-resource-manager.intel.com/pod", "kube-system", "kube-system"),
        # The container named in the key need not be in the pod: the request is still refused.
        ("prefer-reserved-cpus.resource-enforcer.dev/container.typo", "kube-system", "kube-system"),
        ("prefer-isolated-cpus.resource-enforcer.dev/container.app", "rt-audio", "rt-*"),
    ],
)
def test_preference_the_namespace_may_not_use_is_forbidden(
    key: str, allowed_in: str, globs: str
) -> None:
    p = pod([container("app")], annotations={key: "true"})
    denial = deny(p, CONFIGURED, namespace="shop")
    assert (denial.code, denial.reason) == (403, "preference-forbidden")
    assert f'"{key}"' in denial.message and '"shop"' in denial.message
    assert f"allowed namespaces: {globs}" in denial.message
    assert RESOURCES_KEY in run(p, CONFIGURED, namespace=allowed_in)["metadata"]["annotations"]
    # "false" asks for nothing: allowed in every namespace.
    declined = pod([container("app")], annotations={key: "false"})
    assert RESOURCES_KEY in run(declined, CONFIGURED, namespace="shop")["metadata"]["annotations"]
    # Without the configuration the webhook cannot know the rules: the enforcer checks them.
    assert RESOURCES_KEY in run(p, OPEN, namespace="shop")["metadata"]["annotations"]


def test_preference_open_to_every_namespace_by_default_is_allowed() -> None:
    p = pod(
        [container("app")], annotations={"prefer-shared-cpus.resource-enforcer.dev/pod": "true"}
    )
    assert RESOURCES_KEY in run(p, CONFIGURED, namespace="shop")["metadata"]["annotations"]


def test_bad_preference_value_is_denied_before_access_is_checked() -> None:
    p = pod([container("app")], annotations={"cpu.preserve.resource-enforcer.dev/pod": "yes"})
    assert deny(p, CONFIGURED, namespace="shop").reason == "preference"


@pytest.mark.parametrize("bad", ["1.5.3", "abc", "1Zi", "--1", "NaN", "Infinity", " 1"])
def test_bad_quantity_is_denied(bad: str) -> None:
    denial = deny(pod([container("app", {"ephemeral-storage": bad})]))
    assert (denial.code, denial.reason) == (400, "quantity")
    assert bad in denial.message and "app" in denial.message
