"""`resource-enforcer plan` reads pod-level resources (`spec.resources`) as the enforcer does.

Through the console script on a recorded server: each pod of the QoS table
(tests/unit/test_pod_level_qos.py, Kubernetes 1.37's rules) is shown with Kubernetes' QoS
class; no container of a pod with pod-level resources gets exclusive CPUs (kubelet's static
policy), a Guaranteed pod without them still does; a Deployment's template with pod-level
resources is planned per replica; a negative pod-level quantity is refused at admission.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from tests.policy.test_plan_workloads import run_plan
from tests.unit.test_pod_level_qos import TABLE, spec_of

CONFIGS = {
    "static": {"policy": {"name": "static", "reservedCPUs": "0,56"}},
    "topology-aware": {"policy": {"name": "topology-aware", "reservedCPUs": "0,56"}},
}


def _pods() -> list[dict]:
    pods = []
    for name, resources, containers, init, _qos in TABLE:
        spec = json.loads(json.dumps(spec_of(resources, containers, init)))
        for c in [*spec.get("initContainers", []), *spec["containers"]]:
            c["image"] = "busybox"
        pods.append({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec})
    return pods


def _pod_level(resources: dict | None) -> bool:
    return bool(
        resources
        and any(
            k in ("cpu", "memory") or k.startswith("hugepages-")
            for part in ("requests", "limits")
            for k in resources.get(part) or {}
        )
    )


@pytest.mark.parametrize("policy", sorted(CONFIGS))
def test_plan_classes_and_places_pods_by_their_pod_level_resources(
    policy: str, snapshot_roots: dict[str, Path], tmp_path: Path
) -> None:
    done = run_plan(
        tmp_path, snapshot_roots["server"], CONFIGS[policy], yaml.safe_dump_all(_pods())
    )
    assert done.returncode == 0, done.stderr
    rows = json.loads(done.stdout)
    expected = {name: (qos, _pod_level(resources)) for name, resources, _c, _i, qos in TABLE}
    assert {r["pod"] for r in rows} == set(expected)
    for row in rows:
        qos, pod_level = expected[row["pod"]]
        assert row["qos"] == qos, row
        assert row["error"] is None, row
        if pod_level:
            assert row["exclusiveCPUs"] == "", row  # shared CPUs only
    # A Guaranteed pod without pod-level resources keeps CPUs of its own.
    (plain,) = [r for r in rows if r["pod"] == "none-guaranteed"]
    assert plain["exclusiveCPUs"] != ""


def test_a_deployment_with_pod_level_resources_is_planned_per_replica(
    snapshot_roots: dict[str, Path], tmp_path: Path
) -> None:
    budget = {"cpu": "2", "memory": "1Gi"}
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "api", "namespace": "prod"},
        "spec": {
            "replicas": 2,
            "template": {
                "metadata": {"labels": {"app": "api"}},
                "spec": {
                    "resources": {"requests": budget, "limits": budget},
                    "containers": [
                        {"name": "app", "image": "busybox"},
                        {"name": "proxy", "image": "busybox"},
                    ],
                },
            },
        },
    }
    done = run_plan(
        tmp_path, snapshot_roots["server"], CONFIGS["static"], yaml.safe_dump(deployment)
    )
    assert done.returncode == 0, done.stderr
    rows = json.loads(done.stdout)
    assert [(r["pod"], r["container"], r["qos"], r["exclusiveCPUs"]) for r in rows] == [
        ("api-0", "app", "Guaranteed", ""),
        ("api-0", "proxy", "Guaranteed", ""),
        ("api-1", "app", "Guaranteed", ""),
        ("api-1", "proxy", "Guaranteed", ""),
    ]


def test_a_negative_pod_level_quantity_is_refused_at_admission(
    snapshot_roots: dict[str, Path], tmp_path: Path
) -> None:
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "neg"},
        "spec": {
            "resources": {"limits": {"cpu": "-2"}},
            "containers": [{"name": "a", "image": "b"}],
        },
    }
    done = run_plan(tmp_path, snapshot_roots["server"], CONFIGS["static"], yaml.safe_dump(pod))
    assert done.returncode == 2, done.stderr
    (row,) = json.loads(done.stdout)
    assert row["error"] == (
        'denied at admission: spec.resources.limits.cpu: "-2" must not be negative'
    )
