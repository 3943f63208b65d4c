"""What operators see of balloons: `plan`'s `balloon` field (TYPE[N]), `status` (table and
JSON), the per-balloon metrics, and `check-config --sysfs-root` on minBalloons."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from bsupport import MACHINE, balloons, req
from prometheus_client import generate_latest

from enforcer.commands.plan import plan
from enforcer.commands.status import status
from enforcer.configuration import parse_config
from enforcer.metrics import EnforcerMetrics
from enforcer.state import StateStore
from enforcer.topology import CPUSet, Topology

CONFIG = """
policy:
  name: balloons
  reservedCPUs: 2
  balloonTypes:
    - name: inference
      namespaces: ["ai-*"]
      minCPUs: 4
      maxCPUs: 8
      minBalloons: 1
      maxBalloons: 2
      cpuClass: turbo
    - name: batch
      namespaces: ["batch"]
      maxCPUs: 2
      maxBalloons: 1
cpuClasses:
  turbo: {minFreq: 2800000}
"""

PODS = """
apiVersion: v1
kind: Pod
metadata: {name: dns, namespace: kube-system}
spec:
  containers:
  - {name: coredns, image: x, resources: {requests: {cpu: 100m}}}
---
apiVersion: v1
kind: Pod
metadata: {name: llm, namespace: ai-prod}
spec:
  containers:
  - {name: server, image: x, resources: {limits: {cpu: "6", memory: 1Gi}}}
  - {name: sidecar, image: x, resources: {requests: {cpu: 500m}}}
---
apiVersion: v1
kind: Pod
metadata:
  name: pinned
  namespace: web
  annotations: {balloon.balloons.resource-policy.nri.io/pod: inference}
spec:
  containers:
  - {name: app, image: x, resources: {requests: {cpu: "3"}}}
---
apiVersion: v1
kind: Pod
metadata: {name: job, namespace: batch}
spec:
  containers:
  - {name: work, image: x, resources: {requests: {cpu: "3"}}}
---
apiVersion: v1
kind: Pod
metadata: {name: site, namespace: web}
spec:
  containers:
  - {name: nginx, image: x}
"""


def test_plan_shows_each_containers_balloon_on_a_recorded_server(
    topologies: dict[str, Topology],
) -> None:
    topology = topologies["server"]
    config = parse_config(yaml.safe_load(CONFIG))
    _, rows = plan(config, topology, list(yaml.safe_load_all(PODS)))
    got = {(r["pod"], r["container"]): r for r in rows}
    assert got[("dns", "coredns")]["balloon"] == "reserved[0]"
    # 6 + 0.5 CPUs: one balloon of 7 CPUs for the pod's two containers.
    server, sidecar = got[("llm", "server")], got[("llm", "sidecar")]
    assert server["balloon"] == sidecar["balloon"] == "inference[0]"
    assert server["cpus"] == sidecar["cpus"] and len(CPUSet.parse(server["cpus"])) == 7
    assert got[("pinned", "app")]["balloon"] == "inference[1]"  # 10 CPUs > maxCPUs 8
    assert len(CPUSet.parse(got[("pinned", "app")]["cpus"])) == 4  # minCPUs
    # batch: maxCPUs 2 cannot hold 3 CPUs: refused, naming the type and its limits.
    job = got[("job", "work")]
    assert job["balloon"] is None and "balloon type batch (minCPUs 0, maxCPUs 2" in job["error"]
    assert got[("site", "nginx")]["balloon"] == "default[0]"
    # Balloons never share a CPU.
    sets = {r["balloon"]: CPUSet.parse(r["cpus"]) for r in rows if r["balloon"]}
    inference = [v for k, v in sets.items() if k.startswith("inference")]
    assert not inference[0] & inference[1]


def test_plan_cli_exit_code_and_balloon_field(tmp_path: Path, snapshot_roots: dict) -> None:
    (tmp_path / "c.yaml").write_text(CONFIG)
    (tmp_path / "p.yaml").write_text(PODS)
    run = subprocess.run(
        [sys.executable, "-m", "enforcer.cli", "plan", "--config", str(tmp_path / "c.yaml"),
         "--sysfs-root", str(snapshot_roots["server"]), "--pods", str(tmp_path / "p.yaml")],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert run.returncode == 2, run.stderr  # the batch job does not fit
    rows = json.loads(run.stdout)
    assert {r["balloon"] for r in rows} >= {"reserved[0]", "inference[0]", "default[0]"}


def test_status_shows_balloons(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    types = [{"name": "ai", "namespaces": ["ai"], "cpuClass": "turbo"}]
    p = balloons(types, cpu_classes={"turbo": {"maxFreq": 3000000}})
    p.admit(req("model", 2000, namespace="ai"))
    p.admit(req("web", 0, namespace="web"))
    StateStore(tmp_path).save(
        {
            "topology": MACHINE.to_dict(),
            "policyConfig": p.config.model_dump(),
            "policy": json.loads(json.dumps(p.to_state())),
            "containers": [],
        }
    )
    assert status(str(tmp_path)) == 0
    out = capsys.readouterr().out
    lines = {line.split()[0]: line.split() for line in out.splitlines() if line.strip()}
    # BALLOON TYPE CPUS REQUESTED IDLE-SHARED CPU-CLASS CONTAINERS
    assert lines["ai[0]"][1:4] == ["ai", "1,9", "2000m"] and lines["ai[0]"][5:] == [
        "turbo",
        "ai/model/model",
    ]
    assert lines["default[0]"][1] == "default" and lines["default[0]"][-1] == "web/web/web"
    assert status(str(tmp_path), "json") == 0
    document = json.loads(capsys.readouterr().out)
    ai = next(b for b in document["balloons"] if b["name"] == "ai[0]")
    assert ai == {
        "name": "ai[0]",
        "type": "ai",
        "instance": 0,
        "cpus": "1,9",
        "requestedMilliCPU": 2000,
        "idleCPUsShared": "",
        "cpuClass": "turbo",
        "containers": ["ai/model/model"],
    }


def test_metrics_per_balloon_follow_the_balloons() -> None:
    p = balloons([{"name": "ai", "namespaces": ["ai"]}])
    metrics = EnforcerMetrics()
    p.admit(req("a", 1500, namespace="ai"))
    metrics.set_balloons(p.balloon_views())
    text = generate_latest(metrics.registry).decode()
    assert 'resource_enforcer_balloon_cpus{balloon_type="ai",instance="0"} 2.0' in text
    assert (
        'resource_enforcer_balloon_requested_millicpu{balloon_type="ai",instance="0"} 1500.0'
        in text
    )
    assert 'resource_enforcer_balloon_containers{balloon_type="reserved",instance="0"} 0.0' in text
    p.release("uid-a/a")
    metrics.set_balloons(p.balloon_views())
    text = generate_latest(metrics.registry).decode()
    assert 'balloon_type="ai"' not in text  # the balloon is gone, and so are its series


def test_check_config_refuses_min_balloons_that_do_not_fit(
    tmp_path: Path, snapshot_roots: dict
) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(
        "policy: {name: balloons, reservedCPUs: 2, balloonTypes: "
        "[{name: big, minCPUs: 64, minBalloons: 2}]}\n"
    )
    run = subprocess.run(
        [sys.executable, "-m", "enforcer.cli", "check-config", str(path),
         "--sysfs-root", str(snapshot_roots["server"])],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert run.returncode == 1
    assert run.stdout.startswith("policy.balloonTypes.0.minBalloons: 2 balloons of type big")
    # Without the machine the file itself is valid.
    run = subprocess.run(
        [sys.executable, "-m", "enforcer.cli", "check-config", str(path)],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert run.returncode == 0, run.stdout
