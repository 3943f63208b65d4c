"""Class and preference resolution: the order of keys, and every refusal."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from resource_contract import resources as resources_module
from resource_contract.classes import (
    ClassAccess,
    ClassRequestError,
    class_keys,
    resolve_class,
    validate_class_annotations,
)
from resource_contract.preferences import (
    PreferenceError,
    resolve_preference,
    validate_preference_annotations,
)
from resource_contract.resources import (
    MAX_BYTES,
    MAX_DEPTH,
    ResourcesAnnotation,
    ResourcesAnnotationError,
    nesting_depth,
)

RDT_ORDER = [
    "rdtclass.resource-enforcer.dev/container.app",
    "rdtclass.resource-policy.nri.io/container.app",
    "rdtclass.cri-resource-manager.intel.com/container.app",
    "rdt.resources.beta.kubernetes.io/container.app",
    "rdtclass.resource-enforcer.dev/pod",
    "rdtclass.resource-policy.nri.io/pod",
    "rdtclass.cri-resource-manager.intel.com/pod",
    "rdt.resources.beta.kubernetes.io/pod",
]


def test_class_keys_follow_the_contract_order() -> None:
    assert class_keys("rdt", "app") == RDT_ORDER
    assert class_keys("blockio", "app") == [
        k.replace("rdtclass.", "blockioclass.").replace(
            "rdt.resources.beta", "blockio.resources.beta"
        )
        for k in RDT_ORDER
    ]


@pytest.mark.parametrize("winner", range(len(RDT_ORDER)))
def test_first_present_key_wins(winner: int) -> None:
    # Every key from the winner on is present, each with its own class: the winner's must win.
    annotations = {key: f"c{i}" for i, key in enumerate(RDT_ORDER) if i >= winner}
    got = resolve_class(annotations, "rdt", "app", qos="Burstable", namespace="ns")
    assert got is not None
    assert (got.name, got.key) == (f"c{winner}", RDT_ORDER[winner])


def test_container_key_of_another_container_is_ignored() -> None:
    annotations = {"rdtclass.resource-enforcer.dev/container.other": "gold"}
    assert resolve_class(annotations, "rdt", "app", qos="Burstable", namespace="ns") is None


def test_qos_default_only_when_configured() -> None:
    assert resolve_class({}, "rdt", "app", qos="Guaranteed", namespace="ns") is None
    got = resolve_class(
        {}, "rdt", "app", qos="Guaranteed", namespace="ns", configured={"Guaranteed"}
    )
    assert got is not None and got.name == "Guaranteed" and not got.explicit
    assert (
        resolve_class({}, "rdt", "app", qos="Burstable", namespace="ns", configured={"Guaranteed"})
        is None
    )


@pytest.mark.parametrize("bad", ["../etc", "a/b", "", ".hidden", "x" * 64, "a b", "é", "..", "/"])
def test_malformed_class_names_are_refused(bad: str) -> None:
    key = "blockioclass.resource-enforcer.dev/pod"
    with pytest.raises(ClassRequestError) as err:
        resolve_class({key: bad}, "blockio", "app", qos="Burstable", namespace="ns")
    assert err.value.reason == "malformed"
    assert key in str(err.value) and f'"{bad}"' in str(err.value)
    with pytest.raises(ClassRequestError):
        validate_class_annotations({key: bad})


def test_unknown_class_names_the_configured_ones() -> None:
    key = "rdtclass.resource-enforcer.dev/container.app"
    with pytest.raises(ClassRequestError) as err:
        resolve_class(
            {key: "platinum"},
            "rdt",
            "app",
            qos="Burstable",
            namespace="ns",
            configured={"gold", "silver"},
        )
    assert err.value.reason == "unknown"
    assert "platinum" in str(err.value) and "gold, silver" in str(err.value)


def test_class_access_by_namespace_glob() -> None:
    access = ClassAccess({"rdt": {"gold": ("prod-*",)}})
    key = "rdtclass.resource-enforcer.dev/pod"
    args = dict(qos="Burstable", configured={"gold", "silver"}, access=access)
    got = resolve_class({key: "gold"}, "rdt", "app", namespace="prod-eu", **args)
    assert got is not None and got.name == "gold"
    with pytest.raises(ClassRequestError) as err:
        resolve_class({key: "gold"}, "rdt", "app", namespace="dev", **args)
    assert err.value.permission_denied
    assert all(s in str(err.value) for s in ['"dev"', '"gold"', "prod-*", "silver"])
    # Unlisted classes are open to every namespace.
    assert resolve_class({key: "silver"}, "rdt", "app", namespace="dev", **args) is not None


def test_restricted_default_class_is_skipped_not_refused() -> None:
    access = ClassAccess({"rdt": {"Guaranteed": ("prod-*",)}})
    got = resolve_class(
        {},
        "rdt",
        "app",
        qos="Guaranteed",
        namespace="dev",
        configured={"Guaranteed"},
        access=access,
    )
    assert got is None


def test_preferences_container_first_then_pod_ours_first() -> None:
    annotations = {
        "prefer-isolated-cpus.resource-policy.nri.io/container.app": "false",
        "prefer-isolated-cpus.resource-enforcer.dev/pod": "true",
    }
    assert resolve_preference(annotations, "prefer-isolated-cpus", "app") is False
    assert resolve_preference(annotations, "prefer-isolated-cpus", "other") is True
    assert resolve_preference({}, "cpu.preserve", "app") is None


@pytest.mark.parametrize("value", ["yes", "True", "1", "", "on"])
def test_preference_values_other_than_true_false_are_refused(value: str) -> None:
    key = "cpu.preserve.cri-resource-manager.intel.com/container.db"
    with pytest.raises(PreferenceError) as err:
        validate_preference_annotations({key: value})
    assert key in str(err.value) and f'"{value}"' in str(err.value)


names = st.from_regex(r"[a-z][a-z0-9-]{0,10}", fullmatch=True)
quantities = st.sampled_from(["100m", "1", "2", "1.5", "1Gi", "512Mi", "0"])
resources = st.fixed_dictionaries(
    {
        "requests": st.dictionaries(st.sampled_from(["cpu", "memory"]), quantities),
        "limits": st.dictionaries(st.sampled_from(["cpu", "memory"]), quantities),
    }
)


@given(st.dictionaries(names, resources, max_size=4), st.dictionaries(names, resources, max_size=2))
def test_resources_annotation_round_trips(containers: dict, inits: dict) -> None:
    annotation = ResourcesAnnotation.model_validate(
        {"containers": containers, "initContainers": inits}
    )
    text = annotation.to_json()
    assert ResourcesAnnotation.parse(text, key="k") == annotation
    assert ResourcesAnnotation.parse(text, key="k").to_json() == text


@pytest.mark.parametrize(
    ("text", "where"),
    [
        ("{", "not valid JSON"),
        ("[]", "(top level)"),
        ('{"containers": {"a": {"requests": {"cpu": []}}}}', "containers.a.requests.cpu"),
        ('{"containers": {"a": {"bogus": 1}}}', "containers.a.bogus"),
        ('{"containers": {"a": {"classes": {"net": "x"}}}}', "containers.a.classes.net"),
    ],
)
def test_malformed_resources_annotation_names_the_field(text: str, where: str) -> None:
    with pytest.raises(ResourcesAnnotationError) as err:
        ResourcesAnnotation.parse(text, key="intel.com/resources")
    assert "intel.com/resources" in str(err.value) and where in str(err.value)


# ----- bounds before work: size and depth are checked before the JSON parser runs ------------


@pytest.fixture
def no_json_parsing(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fails the test if the annotation reaches the JSON parser."""

    def refuse(*_args: object, **_kwargs: object) -> None:
        raise AssertionError("the JSON parser was reached")

    monkeypatch.setattr(resources_module.json, "loads", refuse)


@pytest.mark.parametrize(
    "text",
    [
        "[" * 100_000,
        '{"a":' * 50_000,
        '{"containers": {"app": {"requests": {"cpu": ' + "[" * 100_000 + "]" * 100_000 + "}}}}",
        # A deep value behind a string full of escapes and brackets: still counted.
        '{"a\\"[{": ' + "[" * (MAX_DEPTH + 1),
    ],
    ids=["arrays", "objects", "inside-a-quantity", "after-a-string"],
)
@pytest.mark.usefixtures("no_json_parsing")
def test_deep_nesting_is_refused_before_parsing(text: str) -> None:
    # Issue 11, defect 9: 100,000 levels used to reach json.loads and fail with RecursionError.
    with pytest.raises(ResourcesAnnotationError) as err:
        ResourcesAnnotation.parse(text, key="noderesource.dev/resources")
    assert str(err.value).startswith('annotation "noderesource.dev/resources": nested ')
    assert "levels deep; its format has 4" in str(err.value)


@pytest.mark.usefixtures("no_json_parsing")
def test_an_annotation_above_256_kib_is_refused_before_parsing() -> None:
    assert MAX_BYTES == 256 * 1024
    with pytest.raises(ResourcesAnnotationError, match='"k": longer than 256 KiB'):
        ResourcesAnnotation.parse('{"containers": {}}' + " " * MAX_BYTES, key="k")
    # Bytes, not characters: "é" is two bytes in UTF-8.
    name = "é" * (MAX_BYTES // 2)
    with pytest.raises(ResourcesAnnotationError, match="longer than 256 KiB"):
        ResourcesAnnotation.parse(f'{{"containers": {{"{name}": {{}}}}}}', key="k")


def test_up_to_the_bounds_the_schema_decides() -> None:
    body = '{"containers": {"app": {"requests": {"cpu": "2"}}}}'
    padded = body + " " * (MAX_BYTES - len(body))
    assert ResourcesAnnotation.parse(padded, key="k").get("app") is not None
    # Within the depth bound a wrong shape reaches the schema, whose error names the field.
    deep = '{"containers": {"a": {"requests": {"cpu": ' + "[" * 4 + "]" * 4 + "}}}}"
    assert nesting_depth(deep) == MAX_DEPTH
    with pytest.raises(ResourcesAnnotationError, match=r"containers\.a\.requests\.cpu"):
        ResourcesAnnotation.parse(deep, key="k")


@pytest.mark.parametrize(
    ("text", "depth"),
    [
        ("", 0),
        ('"[[[["', 0),
        ('{"[{": "}}]]"}', 1),
        (r'{"a\\": [{"b\"[": []}]}', 4),
        ('"unterminated [[[[', 0),
        ('"' + '\\"' * 1000 + "\\", 0),
    ],
)
def test_nesting_depth_skips_strings(text: str, depth: int) -> None:
    assert nesting_depth(text) == depth


def test_brackets_in_container_names_are_not_nesting() -> None:
    name = "{[" * 20
    text = ResourcesAnnotation.model_validate(
        {"containers": {name: {"requests": {"cpu": "1"}}}}
    ).to_json()
    assert ResourcesAnnotation.parse(text, key="k").get(name) is not None


@pytest.mark.parametrize("name", ["info", "mon_groups", "mon_data"])
def test_reserved_resctrl_names_are_refused_in_annotations(name: str) -> None:
    from resource_contract.classes import (
        ClassRequestError,
        resolve_class,
        validate_class_annotations,
    )

    key = "rdtclass.resource-enforcer.dev/container.app"
    with pytest.raises(ClassRequestError, match="reserved by the kernel in resctrl") as err:
        validate_class_annotations({key: name})
    assert err.value.key == key and not err.value.permission_denied
    with pytest.raises(ClassRequestError, match=key):
        resolve_class({key: name}, "rdt", "app", qos="Burstable", namespace="default")
    # A block-I/O class of that name is no folder in resctrl.
    validate_class_annotations({"blockioclass.resource-enforcer.dev/pod": name})
