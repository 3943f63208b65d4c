"""`preferenceAccess`: which namespaces may ask for each CPU preference, its defaults, and the
refusal both programs give (the contract's rule, shared by the webhook and the enforcer)."""

from __future__ import annotations

import pytest

from resource_contract.config import Config, parse_config
from resource_contract.preferences import (
    PREFERENCES,
    PreferenceAccess,
    PreferenceForbidden,
    check_preference_access,
    preference_keys,
)

DOMAINS = ["resource-enforcer.dev", "resource-policy.nri.io", "cri-resource-manager.intel.com"]


def test_defaults_restrict_preserve_and_reserved_to_the_reserved_namespaces() -> None:
    access = Config().preference_access()
    for name in ("cpu.preserve", "prefer-reserved-cpus"):
        assert access.patterns(name) == ("kube-system",)
        assert access.allows(name, "kube-system") and not access.allows(name, "default")
    for name in ("prefer-isolated-cpus", "prefer-shared-cpus"):
        assert access.patterns(name) == ("*",) and access.allows(name, "anything")


def test_defaults_follow_reserved_namespaces_and_yield_to_configured_lists() -> None:
    config = parse_config(
        {
            "policy": {"reservedNamespaces": ["kube-system", "monitoring"]},
            "preferenceAccess": {"prefer-reserved-cpus": ["agents-*"], "prefer-shared-cpus": []},
        }
    )
    access = config.preference_access()
    assert access.patterns("cpu.preserve") == ("kube-system", "monitoring")
    assert access.allows("prefer-reserved-cpus", "agents-eu")
    assert not access.allows("prefer-reserved-cpus", "kube-system")
    assert not access.allows("prefer-shared-cpus", "default")  # an empty list: nowhere
    assert access.allows("prefer-isolated-cpus", "default")


def test_globs_are_shell_style_and_case_sensitive() -> None:
    access = PreferenceAccess({"prefer-isolated-cpus": ("rt-*", "lab?")})
    assert access.allows("prefer-isolated-cpus", "rt-audio")
    assert access.allows("prefer-isolated-cpus", "lab1")
    assert not access.allows("prefer-isolated-cpus", "RT-audio")
    assert not access.allows("prefer-isolated-cpus", "lab12")


def test_an_empty_rule_set_allows_everything() -> None:
    annotations = {key: "true" for name in PREFERENCES for key in preference_keys(name, "app")}
    check_preference_access(annotations, "anyone", PreferenceAccess())


@pytest.mark.parametrize("domain", DOMAINS)
@pytest.mark.parametrize("scope", ["pod", "container.app", "container.not-in-the-pod"])
@pytest.mark.parametrize("name", ["cpu.preserve", "prefer-reserved-cpus"])
def test_true_outside_the_allowed_namespaces_is_forbidden(
    domain: str, scope: str, name: str
) -> None:
    key = f"{name}.{domain}/{scope}"
    access = Config().preference_access()
    with pytest.raises(PreferenceForbidden) as err:
        check_preference_access({"unrelated": "x", key: "true"}, "shop", access)
    message = str(err.value)
    assert f'"{key}"' in message and '"shop"' in message and "kube-system" in message
    assert (err.value.key, err.value.preference, err.value.namespace) == (key, name, "shop")
    check_preference_access({key: "true"}, "kube-system", access)


@pytest.mark.parametrize("name", PREFERENCES)
def test_false_asks_for_nothing_and_is_allowed_everywhere(name: str) -> None:
    nobody = PreferenceAccess({n: () for n in PREFERENCES})
    for key in preference_keys(name, "app"):
        check_preference_access({key: "false"}, "shop", nobody)
    with pytest.raises(PreferenceForbidden, match="allowed namespaces: none"):
        check_preference_access({preference_keys(name, "app")[0]: "true"}, "shop", nobody)
