"""CPU-class annotations as the contract's shared rules read them (resource_contract/
cpu_classes.py) and as the enforcer decodes them: which key wins, names checked like class
names with hostile values quoted only in part, configured classes and `classAccess.cpu`."""

from __future__ import annotations

import pytest

from enforcer.decode import ClassSettings, ContainerCreate, DecodeError, decode_container
from enforcer.decode.kubelet import KubeletResources
from enforcer.refusal import Reason
from resource_contract.classes import ClassRequestError
from resource_contract.config import ConfigError, parse_config
from resource_contract.cpu_classes import CpuClassAccess, resolve_cpu_class

C = "cpuclass.resource-enforcer.dev/container.app"
POD = "cpuclass.resource-enforcer.dev/pod"


def test_the_containers_key_wins_over_the_pods() -> None:
    found = resolve_cpu_class({POD: "eco", C: "turbo"}, "app", namespace="ai")
    assert found is not None and (found.name, found.key) == ("turbo", C)
    found = resolve_cpu_class({POD: "eco", C: "turbo"}, "sidecar", namespace="ai")
    assert found is not None and (found.name, found.key) == ("eco", POD)
    # The peers have no such annotation: a look-alike under their domain is not read.
    assert (
        resolve_cpu_class({"cpuclass.resource-policy.nri.io/pod": "x"}, "a", namespace="ai") is None
    )


@pytest.mark.parametrize("value", ["../x", "", ".hidden", "a" * 64, "turbo\n", "x" * 100_000])
def test_malformed_names_are_refused_quoting_a_bounded_part(value: str) -> None:
    with pytest.raises(ClassRequestError) as info:
        resolve_cpu_class({POD: value}, "app", namespace="ai")
    assert info.value.reason == "malformed" and f'"{POD}"' in str(info.value)
    assert len(str(info.value)) < 300


def test_unknown_and_forbidden_classes_name_what_is_allowed() -> None:
    with pytest.raises(ClassRequestError) as info:
        resolve_cpu_class({C: "turob"}, "app", namespace="ai", classes={"turbo", "eco"})
    assert info.value.reason == "unknown"
    assert str(info.value) == (
        f'annotation "{C}": CPU class "turob" is not configured; configured CPU classes '
        "(cpuClasses): eco, turbo"
    )
    access = CpuClassAccess({"turbo": ("ai-*",)})
    with pytest.raises(ClassRequestError) as info:
        resolve_cpu_class(
            {C: "turbo"}, "app", namespace="web", classes={"turbo", "eco"}, access=access
        )
    assert info.value.permission_denied
    assert 'namespace "web" may not use CPU class "turbo" (allowed namespaces: ai-*)' in str(
        info.value
    )
    assert "CPU classes namespace web may use: eco" in str(info.value)
    found = resolve_cpu_class(
        {C: "turbo"}, "app", namespace="ai-x", classes={"turbo"}, access=access
    )
    assert found is not None and found.name == "turbo"


def test_class_access_must_name_configured_cpu_classes() -> None:
    with pytest.raises(ConfigError) as info:
        parse_config({"cpuClasses": {"turbo": {}}, "classAccess": {"cpu": {"trubo": ["ai"]}}})
    assert info.value.problems == [
        "classAccess.cpu.trubo: no CPU class of that name is configured (cpuClasses: turbo)"
    ]
    config = parse_config({"cpuClasses": {"turbo": {}}, "classAccess": {"cpu": {"turbo": ["ai"]}}})
    assert not config.cpu_class_access().allows("turbo", "web")


def create(annotations: dict[str, str]) -> ContainerCreate:
    return ContainerCreate(
        pod_uid="uid",
        pod_name="p",
        namespace="ai",
        container="app",
        annotations=annotations,
        cgroup_parent="/kubepods/poduid",
        resources=KubeletResources(cpu_shares=2048, cpu_quota=200000, cpu_period=100000),
    )


def test_the_decoder_keeps_the_class_and_refuses_with_the_contracts_reasons() -> None:
    settings = ClassSettings(
        cpu_classes={"turbo"}, cpu_class_access=CpuClassAccess({"turbo": ("x",)})
    )
    assert decode_container(create({POD: "turbo"})).cpu_class == "turbo"  # nothing to check
    assert decode_container(create({})).cpu_class is None
    for asked, reason in (
        ({POD: "turob"}, Reason.BAD_REQUEST),
        ({"cpuclass.resource-enforcer.dev/container.other": "../x"}, Reason.BAD_REQUEST),
        ({POD: "turbo"}, Reason.FORBIDDEN),
    ):
        with pytest.raises(DecodeError) as info:
            decode_container(create(asked), classes=settings)
        assert info.value.reason is reason and "pod ai/p: annotation" in str(info.value)
