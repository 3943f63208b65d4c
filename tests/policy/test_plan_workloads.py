"""`resource-enforcer plan` over workloads (their pod templates, replicas honoured), its exit
codes and the rows of containers it could not place, through the console script on real
server snapshots."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import yaml

EXE = Path(sys.executable).parent / "resource-enforcer"

# The keys of a row, in the order ../shared/CONTRACT.md lists them.
ROW_KEYS = [
    "namespace",
    "pod",
    "container",
    "qos",
    "cpus",
    "mems",
    "exclusiveCPUs",
    "sharedCPUs",
    "pool",
    "rdtClass",
    "blockioClass",
    "balloon",
    "cpuClass",
    "error",
]

TOPOLOGY_AWARE = {
    "policy": {
        "name": "topology-aware",
        "reservedCPUs": "0,56",
        "reservedNamespaces": ["kube-system"],
    }
}


def container(name: str, resources: dict) -> dict:
    return {"name": name, "image": "busybox", "resources": resources}


G2 = {"limits": {"cpu": "2", "memory": "1Gi"}}
G4 = {"limits": {"cpu": "4", "memory": "4Gi"}}
SMALL = {"requests": {"cpu": "100m", "memory": "64Mi"}}


def template(*containers: dict, annotations: dict | None = None) -> dict:
    meta: dict = {"labels": {"app": "x"}}
    if annotations:
        meta["annotations"] = annotations
    return {"metadata": meta, "spec": {"containers": list(containers)}}


WORKLOADS = [
    {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "api", "namespace": "prod"},
        "spec": {"replicas": 3, "template": template(container("api", G2))},
    },
    {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": {"name": "db", "namespace": "data"},
        "spec": {"replicas": 2, "serviceName": "db", "template": template(container("pg", G4))},
    },
    {  # one pod: the one this node runs
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": "agent", "namespace": "kube-system"},
        "spec": {"template": template(container("agent", SMALL))},
    },
    {  # no replicas: 1
        "apiVersion": "apps/v1",
        "kind": "ReplicaSet",
        "metadata": {"name": "cache", "namespace": "prod"},
        "spec": {"template": template(container("redis", SMALL))},
    },
    {  # 3 at once, but only 2 to complete: 2 pods
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "batch", "namespace": "jobs"},
        "spec": {"parallelism": 3, "completions": 2, "template": template(container("w", {}))},
    },
    {  # one run of its Job; the template's annotations come along
        "apiVersion": "batch/v1",
        "kind": "CronJob",
        "metadata": {"name": "report", "namespace": "jobs"},
        "spec": {
            "schedule": "0 * * * *",
            "jobTemplate": {
                "spec": {
                    "template": template(
                        container("report", G2),
                        annotations={"prefer-isolated-cpus.resource-enforcer.dev/pod": "false"},
                    )
                }
            },
        },
    },
    {  # scaled to zero: nothing
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "paused", "namespace": "prod"},
        "spec": {"replicas": 0, "template": template(container("app", G2))},
    },
]


def as_pods(workloads: list[dict]) -> list[dict]:
    """The same pods, written out by hand as a user would without workloads."""
    counts = {"api": 3, "db": 2, "agent": 1, "cache": 1, "batch": 2, "report": 1, "paused": 0}
    pods = []
    for w in workloads:
        name, namespace = w["metadata"]["name"], w["metadata"]["namespace"]
        spec = w["spec"]["jobTemplate"]["spec"] if w["kind"] == "CronJob" else w["spec"]
        tmpl = spec["template"]
        for i in range(counts[name]):
            pods.append(
                {
                    "apiVersion": "v1",
                    "kind": "Pod",
                    "metadata": {**tmpl["metadata"], "name": f"{name}-{i}", "namespace": namespace},
                    "spec": tmpl["spec"],
                }
            )
    return pods


def run_plan(
    tmp_path: Path, sysfs: Path, config: dict, manifests: str, *extra: str
) -> subprocess.CompletedProcess[str]:
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(config))
    pods = tmp_path / "pods.yaml"
    pods.write_text(manifests)
    return subprocess.run(
        [
            str(EXE),
            "plan",
            "--config",
            str(tmp_path / "config.yaml"),
            "--sysfs-root",
            str(sysfs),
            "--pods",
            str(pods),
            *extra,
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_workloads_are_planned_as_their_pods(
    snapshot_roots: dict[str, Path], tmp_path: Path
) -> None:
    server = snapshot_roots["server"]
    done = run_plan(tmp_path, server, TOPOLOGY_AWARE, yaml.safe_dump_all(WORKLOADS))
    assert done.returncode == 0, done.stderr  # everything placed
    rows = json.loads(done.stdout)
    assert [(r["namespace"], r["pod"], r["container"]) for r in rows] == [
        ("prod", "api-0", "api"),
        ("prod", "api-1", "api"),
        ("prod", "api-2", "api"),
        ("data", "db-0", "pg"),
        ("data", "db-1", "pg"),
        ("kube-system", "agent-0", "agent"),
        ("prod", "cache-0", "redis"),
        ("jobs", "batch-0", "w"),
        ("jobs", "batch-1", "w"),
        ("jobs", "report-0", "report"),
    ]
    assert all(list(r) == ROW_KEYS and r["error"] is None for r in rows)
    # Each replica holds CPUs of its own.
    api = [set(r["exclusiveCPUs"].split(",")) for r in rows if r["pod"].startswith("api-")]
    assert all(len(cpus) == 2 for cpus in api) and not (api[0] & api[1] | api[1] & api[2])
    assert [r["qos"] for r in rows[5:9]] == ["Burstable"] * 2 + ["BestEffort"] * 2
    assert rows[5]["pool"] == "reserved"  # kube-system: the workload's namespace is used
    # The template's annotations reach the pod: the CronJob's 2 CPUs are not isolated ones.
    assert not set(rows[9]["exclusiveCPUs"].split(",")) & {"4", "5", "6", "7", "60", "61"}

    # Exactly what the same pods written out one by one give, through a `kind: List` too.
    by_hand = run_plan(
        tmp_path,
        server,
        TOPOLOGY_AWARE,
        yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": as_pods(WORKLOADS)}),
    )
    assert by_hand.returncode == 0, by_hand.stderr
    assert json.loads(by_hand.stdout) == rows


def test_unplaced_containers_exit_2_with_qos_and_nearest_pool(
    snapshot_roots: dict[str, Path], tmp_path: Path
) -> None:
    # sample1: 16 CPUs; 2 reserved leave 14 (nothing runs shared, so all may go): 14 fit of 16.
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "pinned", "namespace": "prod"},
        "spec": {
            "replicas": 16,
            "template": template(container("app", {"limits": {"cpu": "1", "memory": "64Mi"}})),
        },
    }
    config = {"policy": {**TOPOLOGY_AWARE["policy"], "reservedCPUs": 2}}
    done = run_plan(tmp_path, snapshot_roots["sample1"], config, yaml.safe_dump(deployment))
    assert done.returncode == 2, done.stderr
    rows = json.loads(done.stdout)
    placed = [r for r in rows if r["error"] is None]
    refused = [r for r in rows if r["error"] is not None]
    assert len(placed) == 14 and [r["pod"] for r in refused] == ["pinned-14", "pinned-15"]
    for r in refused:
        assert list(r) == ROW_KEYS
        assert r["qos"] == "Guaranteed"  # from the pod spec, though nothing was placed
        assert r["cpus"] is r["mems"] is r["exclusiveCPUs"] is r["sharedCPUs"] is None
        # The pool that came closest, as the message names it.
        assert (
            r["pool"] and f"the best, {r['pool']}, has 0 CPUs free for exclusive use" in r["error"]
        )

    # Under static there are no pools to compare: the reason alone.
    static = {"policy": {"name": "static", "reservedCPUs": 2}}
    done = run_plan(
        tmp_path, snapshot_roots["sample1"], static, yaml.safe_dump(deployment), "--format", "table"
    )
    assert done.returncode == 2, done.stderr
    not_placed = [line for line in done.stdout.splitlines() if line.startswith("NOT PLACED")]
    assert not_placed and all("asked for 1 exclusive CPUs" in line for line in not_placed)
    done = run_plan(tmp_path, snapshot_roots["sample1"], static, yaml.safe_dump(deployment))
    refused = [r for r in json.loads(done.stdout) if r["error"]]
    assert refused and all((r["qos"], r["pool"]) == ("Guaranteed", None) for r in refused)


def test_a_container_denied_at_admission_still_shows_its_qos(
    snapshot_roots: dict[str, Path], tmp_path: Path
) -> None:
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "classy",
            "namespace": "prod",
            "annotations": {"rdtclass.resource-enforcer.dev/pod": "platinum"},
        },
        "spec": {"containers": [container("app", SMALL)]},
    }
    done = run_plan(tmp_path, snapshot_roots["server"], TOPOLOGY_AWARE, yaml.safe_dump(pod))
    assert done.returncode == 2, done.stderr
    [row] = json.loads(done.stdout)
    assert row["qos"] == "Burstable" and "platinum" in row["error"] and row["pool"] is None


@pytest.mark.parametrize(
    ("manifest", "message"),
    [
        (
            "kind: Service\nmetadata: {name: web}\n",
            "document 0: kind: expected one of Pod, Deployment, StatefulSet, ReplicaSet, "
            "DaemonSet, Job, CronJob, ResourceClaim, ResourceClaimTemplate, ResourceSlice, "
            "DeviceClass, got 'Service'",
        ),
        (
            """
            kind: Pod
            metadata: {name: ok}
            spec: {containers: [{name: a}]}
            ---
            kind: Deployment
            metadata: {name: api}
            spec:
              replicas: three
              template: {spec: {containers: [{name: a}]}}
            """,
            "document 1: spec.replicas: expected a whole number of 0 or more, got 'three'",
        ),
        (
            "kind: StatefulSet\nmetadata: {name: db}\nspec: {replicas: 1}\n",
            "document 0: spec.template is missing",
        ),
        (
            """
            kind: List
            items:
            - kind: CronJob
              metadata: {name: report}
              spec: {jobTemplate: {spec: {template: {spec: {containers: [{image: x}]}}}}}
            """,
            "document 0 items[0]: spec.jobTemplate.spec.template.spec.containers[0].name is "
            "missing",
        ),
        (
            """
            kind: Job
            metadata: {name: j}
            spec:
              template:
                spec:
                  containers: [{name: a, resources: {limits: {cpu: lots}}}]
            """,
            "document 0: spec.template.spec.containers[0].resources.limits.cpu: invalid "
            "quantity 'lots'",
        ),
    ],
    ids=["other-kind", "replicas", "no-template", "cronjob-container", "quantity"],
)
def test_bad_input_exits_1_naming_the_field(
    snapshot_roots: dict[str, Path], tmp_path: Path, manifest: str, message: str
) -> None:
    done = run_plan(tmp_path, snapshot_roots["sample1"], TOPOLOGY_AWARE, textwrap.dedent(manifest))
    assert done.returncode == 1
    assert done.stdout == ""
    assert done.stderr == f"{tmp_path}/pods.yaml: {message}\n"
