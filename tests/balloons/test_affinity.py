"""Container affinity and anti-affinity: the peers' annotation syntax, decided in the pure
topology-aware and balloons policies, visible in `plan` (the webhook's checks are in
tests/webhook/test_webhook_balloons.py).

MACHINE: 2 sockets x 2 NUMA nodes x 2 cores x 2 threads (see bsupport.py)."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
import yaml
from bsupport import MACHINE, balloons, req

from enforcer.commands.plan import plan
from enforcer.configuration import parse_config
from enforcer.policy import Admitted, make_policy
from resource_contract.affinity import (
    AffinityError,
    AffinityTerm,
    Expression,
    parse_affinity,
    resolve_affinity,
)
from resource_contract.policy_config import PolicyConfig

AFF = "resource-policy.nri.io/affinity"
ANTI = "resource-policy.nri.io/anti-affinity"


def test_shorthand_and_full_syntax() -> None:
    annotations = {
        AFF: "peter:\n- match: {key: name, operator: Equals, values: [sheep]}\n  weight: 5\n",
        ANTI: "peter: [wolf]\n",
    }
    assert resolve_affinity(annotations, "peter") == (
        AffinityTerm(5, Expression("name", "Equals", ("sheep",))),
        AffinityTerm(-1, Expression("labels/io.kubernetes.container.name", "In", ("wolf",))),
    )
    assert resolve_affinity(annotations, "sheep") == ()
    # Ours wins over the peers' key of the same kind.
    ours = {"resource-enforcer.dev/affinity": "peter: [dog]", AFF: "peter: [cat]"}
    assert resolve_affinity(ours, "peter")[0].match.values == ("dog",)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("a: [{match: {key: name, operator: Like, values: [x]}}]", "a[0].match.operator: 'Like'"),
        ("a: [{match: {key: colour, operator: Exists}}]", "a[0].match.key: 'colour'"),
        ("a: [{match: {key: name, operator: Equals, values: [x, y]}}]", "exactly one value"),
        ("a: [{match: {key: name, operator: In, values: [x]}, weight: 5000}]", "outside"),
        ("a: [{scope: {key: name, operator: In, values: [x]}}]", "a rule needs `match`"),
        ("a: {b: c}", "a: must be a list"),
        ("a: [", "not valid YAML"),
        ("[a, b]", "must map container names"),
    ],
)
def test_malformed_annotations_are_named(text: str, message: str) -> None:
    with pytest.raises(AffinityError) as err:
        parse_affinity(text, AFF, 1)
    assert message in str(err.value) and AFF in str(err.value)


def test_topology_aware_pulls_and_pushes_within_a_pod() -> None:
    policy = make_policy(MACHINE, PolicyConfig(name="topology-aware", reservedCPUs="0"))
    annotations = {
        AFF: "peter: [sheep]",
        ANTI: "wolf:\n- match: {key: name, operator: In, values: [sheep]}\n  weight: 10",
    }

    def farm(name: str):  # type: ignore[no-untyped-def]
        r = req(name, 1000, pod="farm", qos="Guaranteed")
        return replace(r, affinity=resolve_affinity(annotations, name))

    sheep = policy.admit(farm("sheep")).cpus
    wolf = policy.admit(farm("wolf")).cpus
    peter = policy.admit(farm("peter")).cpus
    assert MACHINE.sockets_of_cpus(wolf) != MACHINE.sockets_of_cpus(sheep)  # pushed far
    assert MACHINE.nodes_of_cpus(peter) == MACHINE.nodes_of_cpus(sheep)  # pulled close


def test_topology_aware_label_matched_containers_on_the_node() -> None:
    policy = make_policy(MACHINE, PolicyConfig(name="topology-aware", reservedCPUs="0"))
    db = replace(req("db", 1000, qos="Guaranteed"), labels=(("app", "db"),))
    db_node = MACHINE.nodes_of_cpus(policy.admit(db).cpus)
    rule = (
        "app:\n- scope: {operator: AlwaysTrue}\n"
        "  match: {key: labels/app, operator: In, values: [db]}\n  weight: 3"
    )
    near = replace(
        req("app", 1000, qos="Guaranteed"), affinity=resolve_affinity({AFF: rule}, "app")
    )
    assert MACHINE.nodes_of_cpus(policy.admit(near).cpus) == db_node
    # Without the rule the next container goes to the least loaded node instead.
    plain = req("other", 1000, qos="Guaranteed")
    assert MACHINE.nodes_of_cpus(policy.admit(plain).cpus) != db_node


def test_balloons_affinity_pulls_into_and_pushes_out_of_a_balloon() -> None:
    p = balloons([{"name": "t", "namespaces": ["*"], "minBalloons": 2, "minCPUs": 2}])
    p.admit(replace(req("db", 500), labels=(("app", "db"),)))
    anywhere = (
        "- scope: {operator: AlwaysTrue}\n  match: {key: labels/app, operator: In, values: [db]}"
    )
    pulled = replace(
        req("near", 500), affinity=resolve_affinity({AFF: f"near:\n{anywhere}"}, "near")
    )
    pushed = replace(req("far", 500), affinity=resolve_affinity({ANTI: f"far:\n{anywhere}"}, "far"))
    db_balloon = p.placement("uid-db/db").pool
    assert p.admit(pulled).pool == db_balloon
    assert p.admit(pushed).pool != db_balloon


def test_affinity_survives_the_state_file() -> None:
    r = replace(
        req("a", 100),
        affinity=resolve_affinity({ANTI: "a: [b]", AFF: "a: [c]"}, "a"),
        labels=(("app", "x"),),
    )
    entry = Admitted(r, "shared")
    assert Admitted.from_dict(json.loads(json.dumps(entry.to_dict()))) == entry


@pytest.mark.parametrize(
    "damaged",
    [
        [[1, [None, "In", ["x"]], None]],  # once the key "None"
        [[True, ["name", "In", ["x"]], None]],  # once the weight 1
        [["5", ["name", "In", ["x"]], None]],
        [[5000, ["name", "In", ["x"]], None]],
        [[1, ["name", "Like", ["x"]], None]],
        [[1, ["name", "In", "xy"], None]],  # once the values x and y
        [[1, ["name", "In", ["x"]], ["namespace", "AlwaysTrue"]]],
        [[1, ["name", "In", ["x"]]]],
    ],
)
def test_a_damaged_saved_rule_is_refused_never_read_as_another(damaged: object) -> None:
    saved = Admitted(req("a", 100), "shared").to_dict()
    with pytest.raises(ValueError, match="affinity"):
        Admitted.from_dict({**saved, "request": {**saved["request"], "affinity": damaged}})


PODS = """
apiVersion: v1
kind: Pod
metadata:
  name: farm
  namespace: zoo
  annotations:
    resource-policy.nri.io/anti-affinity: |
      wolf: [sheep]
spec:
  containers:
  - {name: sheep, image: x, resources: {limits: {cpu: "2", memory: 1Gi}}}
  - {name: wolf, image: x, resources: {limits: {cpu: "2", memory: 1Gi}}}
"""


def test_plan_shows_the_decision() -> None:
    config = parse_config({"policy": {"name": "topology-aware", "reservedCPUs": "0"}})
    _, rows = plan(config, MACHINE, list(yaml.safe_load_all(PODS)))
    pools = {r["container"]: r["pool"] for r in rows}
    assert pools["sheep"].split("/")[0] != pools["wolf"].split("/")[0]  # different sockets
    # Without the annotation they would share a NUMA node.
    plain = PODS.replace("resource-policy.nri.io/anti-affinity", "unrelated")
    _, rows = plan(config, MACHINE, list(yaml.safe_load_all(plain)))
    assert len({r["pool"] for r in rows}) == 1
