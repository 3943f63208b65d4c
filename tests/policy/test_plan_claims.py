"""`resource-enforcer plan` with ResourceClaims: what a claim gets on a recorded machine (our
driver's devices in both modes, aligned with another driver's fake GPU), that claimed CPUs and
the policy's exclusive CPUs never overlap, and the messages and exit codes of claims that cannot
be met and of bad input."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from enforcer.commands.manifests import PlanInputError, load_manifests
from enforcer.commands.plan import plan
from enforcer.sysfs import read_topology
from enforcer.topology import CPUSet, Topology
from resource_contract.config import Config

EXE = Path(sys.executable).parent / "resource-enforcer"
CPU = "cpu.resource-enforcer.dev"
STD = "resource.kubernetes.io"
MACHINE = "4-socket-server-nosnc"  # nodes 0-3: 0-17,72-89 | 18-35,90-107 | 36-53,108-125 | ...
NODE2 = CPUSet.parse("36-53,108-125")


def config(mode: str = "individual", enabled: bool = True, **policy: Any) -> dict[str, Any]:
    return {
        "policy": {"name": "topology-aware", "reservedCPUs": "0,72", **policy},
        "dra": {"enabled": enabled, "mode": mode},
    }


def gpu_slice() -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": "node-gpus"},
        "spec": {
            "driver": "gpu.example.com",
            "nodeName": "node",
            "pool": {"name": "node", "generation": 1, "resourceSliceCount": 1},
            "devices": [
                {
                    "name": "gpu-0",
                    "attributes": {
                        f"{STD}/numaNode": {"int": 2},
                        f"{STD}/pcieRoot": {"string": "pci0000:80"},
                    },
                }
            ],
        },
    }


GPU_CLASS = {
    "apiVersion": "resource.k8s.io/v1",
    "kind": "DeviceClass",
    "metadata": {"name": "gpu.example.com"},
    "spec": {"selectors": [{"cel": {"expression": 'device.driver == "gpu.example.com"'}}]},
}


def cpus_request(name: str = "cpus", count: int = 2, **extra: Any) -> dict[str, Any]:
    return {"name": name, "exactly": {"deviceClassName": CPU, "count": count, **extra}}


def claim_spec(*requests: dict[str, Any], constraints: list[Any] | None = None) -> dict:
    devices: dict[str, Any] = {"requests": list(requests)}
    if constraints:
        devices["constraints"] = constraints
    return {"devices": devices}


def template(name: str, spec: dict, namespace: str = "ai") -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"spec": spec},
    }


def resource_claim(name: str, spec: dict, namespace: str = "ai") -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": namespace},
        "spec": spec,
    }


ALIGNED = claim_spec(
    {"name": "gpu", "exactly": {"deviceClassName": "gpu.example.com"}},
    cpus_request(count=4),
    constraints=[{"requests": ["gpu", "cpus"], "matchAttribute": f"{STD}/numaNode"}],
)


def pod(
    name: str,
    *containers: dict[str, Any],
    claims: list[dict[str, Any]] | None = None,
    namespace: str = "ai",
) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": list(containers)}
    if claims:
        spec["resourceClaims"] = claims
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace},
        "spec": spec,
    }


def using(name: str, *claims: str | dict[str, str]) -> dict[str, Any]:
    refs = [{"name": c} if isinstance(c, str) else c for c in claims]
    return {"name": name, "image": "busybox", "resources": {"claims": refs}}


def guaranteed(name: str, cpus: int) -> dict[str, Any]:
    limits = {"cpu": str(cpus), "memory": "1Gi"}
    return {"name": name, "image": "busybox", "resources": {"limits": limits}}


@pytest.fixture(scope="module")
def machine(snapshot_roots: dict[str, Path]) -> tuple[Path, Topology]:
    root = snapshot_roots[MACHINE]
    return root, read_topology(root)


def run_plan(tmp_path: Path, sysfs: Path, cfg: dict, docs: list[dict], *extra: str) -> Any:
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(cfg))
    (tmp_path / "pods.yaml").write_text(yaml.safe_dump_all(docs))
    command = [str(EXE), "plan", "--config", str(tmp_path / "config.yaml")]
    command += ["--sysfs-root", str(sysfs), "--pods", str(tmp_path / "pods.yaml"), *extra]
    return subprocess.run(command, capture_output=True, text=True, timeout=120)


def plan_rows(
    tmp_path: Path, topology: Topology, cfg: dict, docs: list[dict]
) -> tuple[list[dict], dict[str, dict]]:
    """Container rows and claim rows by name, in process (the console script is run above)."""
    (tmp_path / "pods.yaml").write_text(yaml.safe_dump_all(docs))
    claim_rows: list[dict] = []
    _, rows = plan(
        Config.model_validate(cfg),
        topology,
        load_manifests(str(tmp_path / "pods.yaml")).entries,
        claim_rows,
    )
    return rows, {c["claim"]: c for c in claim_rows}


def by_container(rows: list[dict]) -> dict[str, dict]:
    return {f"{r['pod']}/{r['container']}": r for r in rows}


def test_a_claim_aligned_with_a_gpu_gets_cpus_of_the_gpus_numa_node(
    machine: tuple[Path, Topology], tmp_path: Path
) -> None:
    root, _ = machine
    docs = [
        gpu_slice(),
        GPU_CLASS,
        template("near-gpu", ALIGNED),
        pod(
            "trainer",
            using("main", "hw"),
            claims=[{"name": "hw", "resourceClaimTemplateName": "near-gpu"}],
        ),
        pod("db", guaranteed("pg", 4)),
    ]
    done = run_plan(tmp_path, root, config(), docs)
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    rows = by_container([r for r in out if "container" in r])
    claims = {c["claim"]: c for c in out if "claim" in c}
    main = rows["trainer/main"]
    cpus = CPUSet.parse(main["cpus"])
    # Without the constraint the first free CPUs (node 0's 1-4) would be taken.
    assert len(cpus) == 4 and cpus <= NODE2
    assert (
        main["mems"] == "2"
        and main["exclusiveCPUs"] == main["cpus"]
        and main["claims"] == ["trainer-hw"]
    )
    hw = claims["trainer-hw"]
    assert hw["error"] is None and hw["pods"] == ["trainer"] and hw["cpus"] == main["cpus"]
    assert {(d["request"], d["driver"], d["device"]) for d in hw["devices"]} == {
        ("gpu", "gpu.example.com", "gpu-0"),
        *(("cpus", CPU, f"cpu-{c}") for c in cpus),
    }
    # The claim's CPUs are nobody else's: the next exclusive container gets others.
    assert not CPUSet.parse(rows["db/pg"]["exclusiveCPUs"]) & cpus
    assert len(CPUSet.parse(rows["db/pg"]["exclusiveCPUs"])) == 4


def test_a_claim_that_cannot_be_met_exits_2_naming_the_request(
    machine: tuple[Path, Topology], tmp_path: Path
) -> None:
    root, _ = machine
    node0 = f'device.attributes["{CPU}"].numaNode == 0'
    docs = [
        resource_claim(
            "too-big",
            claim_spec(cpus_request("node0", 40, selectors=[{"cel": {"expression": node0}}])),
        ),
        pod("app", using("main", "c"), claims=[{"name": "c", "resourceClaimName": "too-big"}]),
    ]
    done = run_plan(tmp_path, root, config(), docs, "--format", "table")
    assert done.returncode == 2, done.stderr
    # Node 0 has 36 CPUs; 0 and 72 are reserved.
    message = (
        "claim ai/too-big: request 'node0' asks for 40 devices of class "
        f"{CPU}: 34 match its selectors, 34 of them free"
    )
    assert f"NOT ALLOCATED {message}" in done.stdout
    assert f"NOT PLACED ai/app/main: {message}" in done.stdout


def test_bad_claims_exit_1_naming_document_and_field(
    machine: tuple[Path, Topology], tmp_path: Path
) -> None:
    root, _ = machine
    docs = [pod("a", guaranteed("x", 1)), template("t", claim_spec(cpus_request(count=0)))]
    done = run_plan(tmp_path, root, config(), docs)
    assert done.returncode == 1 and done.stdout == ""
    assert done.stderr == (
        f"{tmp_path}/pods.yaml: document 1: spec.spec.devices.requests[0].exactly.count: "
        "expected a whole number 1-128, got 0\n"
    )


def test_grouped_mode_takes_capacity_of_a_numa_node_and_picks_whole_cores(
    machine: tuple[Path, Topology], tmp_path: Path
) -> None:
    _, topology = machine
    on_node2 = {
        "selectors": [{"cel": {"expression": f'device.attributes["{CPU}"].numaNode == 2'}}],
        "capacity": {"requests": {"cpu": "16"}},
    }
    docs = [
        template("n2", claim_spec(cpus_request(count=1, **on_node2))),
        *(
            pod(
                f"p{i}",
                using("main", "c"),
                claims=[{"name": "c", "resourceClaimTemplateName": "n2"}],
            )
            for i in range(3)
        ),
    ]
    rows, claims = plan_rows(tmp_path, topology, config("grouped"), docs)
    got = [CPUSet.parse(r["cpus"]) for r in rows[:2]]
    # Node 2 has 36 CPUs: two claims of 16 fit, each on 8 whole cores of node 2, apart.
    assert all(len(c) == 16 and c <= NODE2 for c in got) and not got[0] & got[1]
    assert all(sum(core <= c for core in topology.cores()) == 8 for c in got)
    assert claims["p0-c"]["devices"][0]["consumed"] == {"cpu": "16"}
    assert (
        rows[2]["error"]
        == claims["p2-c"]["error"]
        == (
            f"claim ai/p2-c: request 'cpus' asks for 1 device of class {CPU} with capacity cpu=16: "
            "1 match its selectors, 0 of them free"
        )
    )


def test_a_named_claim_is_allocated_once_and_shared_by_its_pods(
    machine: tuple[Path, Topology], tmp_path: Path
) -> None:
    _, topology = machine
    ref = [{"name": "shared", "resourceClaimName": "pair"}]
    docs = [
        pod("a", using("main", "shared"), claims=ref),
        pod("b", using("main", "shared"), claims=ref),
        resource_claim("pair", claim_spec(cpus_request(count=2))),
    ]
    rows, claims = plan_rows(tmp_path, topology, config(), docs)
    assert rows[0]["cpus"] == rows[1]["cpus"] == claims["pair"]["cpus"] == "1-2"
    assert claims["pair"]["pods"] == ["a", "b"] and list(claims) == ["pair"]


def test_a_container_naming_one_request_gets_the_whole_claim_as_on_the_node(
    machine: tuple[Path, Topology], tmp_path: Path
) -> None:
    _, topology = machine
    spec = claim_spec(cpus_request("one", 1), cpus_request("two", 2))
    docs = [
        template("t", spec),
        pod(
            "p",
            using("a", {"name": "c", "request": "one"}),
            using("b", {"name": "c", "request": "two"}),
            claims=[{"name": "c", "resourceClaimTemplateName": "t"}],
        ),
    ]
    rows, _ = plan_rows(tmp_path, topology, config(), docs)
    # The driver hands kubelet one CDI device per claim, so both run on all three CPUs.
    assert [r["cpus"] for r in rows] == ["1-3", "1-3"]


def test_a_container_naming_only_the_gpu_request_is_placed_by_the_policy(
    machine: tuple[Path, Topology], tmp_path: Path
) -> None:
    _, topology = machine
    docs = [
        gpu_slice(),
        GPU_CLASS,
        template("t", ALIGNED),
        pod(
            "p",
            using("cuda", {"name": "c", "request": "gpu"}),
            using("feeder", {"name": "c", "request": "cpus"}),
            claims=[{"name": "c", "resourceClaimTemplateName": "t"}],
        ),
    ]
    rows, claims = plan_rows(tmp_path, topology, config(), docs)
    cuda, feeder = rows
    assert feeder["pool"] == "claim" and feeder["cpus"] == claims["p-c"]["cpus"]
    assert cuda["pool"] != "claim" and cuda["exclusiveCPUs"] == ""
    assert not CPUSet.parse(cuda["cpus"]) & CPUSet.parse(feeder["cpus"])


def test_the_policys_exclusive_cpus_are_not_offered_to_claims(
    machine: tuple[Path, Topology], tmp_path: Path
) -> None:
    _, topology = machine
    docs = [
        pod("db", guaranteed("pg", 4)),
        resource_claim("later", claim_spec(cpus_request(count=4))),
    ]
    rows, claims = plan_rows(tmp_path, topology, config(), docs)
    exclusive = CPUSet.parse(rows[0]["exclusiveCPUs"])
    assert len(exclusive) == 4
    assert not CPUSet.parse(claims["later"]["cpus"]) & exclusive


def test_without_the_driver_no_cpu_is_published(
    machine: tuple[Path, Topology], tmp_path: Path
) -> None:
    _, topology = machine
    docs = [resource_claim("c", claim_spec(cpus_request(count=1)))]
    _, claims = plan_rows(tmp_path, topology, config(enabled=False), docs)
    assert claims["c"]["error"] == (
        f"claim ai/c: request 'cpus' asks for 1 device of class {CPU}: 0 match its selectors, "
        "0 of them free (dra.enabled is false in the configuration: this node publishes no CPUs)"
    )


@pytest.mark.parametrize(
    ("docs", "message"),
    [
        (
            [pod("p", using("main", "c"))],
            "pod ai/p: container main: resources.claims[0].name: 'c' is not one of the pod's "
            "spec.resourceClaims",
        ),
        (
            [pod("p", using("main", "c"), claims=[{"name": "c"}])],
            "pod ai/p: spec.resourceClaims[0]: exactly one of resourceClaimName and "
            "resourceClaimTemplateName",
        ),
        (
            [{**gpu_slice(), "apiVersion": "resource.k8s.io/v1beta1"}],
            "document 0: apiVersion: ResourceSlice is read as resource.k8s.io/v1, got "
            "'resource.k8s.io/v1beta1'",
        ),
        (
            [{**gpu_slice(), "spec": {**gpu_slice()["spec"], "driver": CPU}}],
            f"document 0: spec.driver: {CPU}'s devices are what plan publishes",
        ),
        (
            [
                resource_claim(
                    "c",
                    {
                        "devices": {
                            "requests": [
                                {
                                    "name": "x",
                                    "exactly": {
                                        "deviceClassName": CPU,
                                        "selectors": [{"cel": {"expression": 7}}],
                                    },
                                }
                            ]
                        }
                    },
                )
            ],
            "document 0: spec.devices.requests[0].exactly.selectors[0].cel.expression: expected "
            "a non-empty string, got 7",
        ),
    ],
    ids=["undeclared-claim", "no-source", "old-api", "our-driver", "expression-type"],
)
def test_bad_input_names_the_field(
    machine: tuple[Path, Topology], tmp_path: Path, docs: list[dict], message: str
) -> None:
    _, topology = machine
    with pytest.raises(PlanInputError) as caught:
        plan_rows(tmp_path, topology, config(), docs)
    assert message in str(caught.value)


def test_a_missing_template_leaves_the_container_unplaced(
    machine: tuple[Path, Topology], tmp_path: Path
) -> None:
    _, topology = machine
    docs = [
        pod("p", using("main", "c"), claims=[{"name": "c", "resourceClaimTemplateName": "nope"}])
    ]
    rows, _ = plan_rows(tmp_path, topology, config(), docs)
    assert rows[0]["cpus"] is None
    assert rows[0]["error"] == (
        "pod ai/p: spec.resourceClaims[0]: ResourceClaimTemplate ai/nope is not in the file "
        "(the pod would stay pending)"
    )


def with_parameters(spec: dict, **parameters: str) -> dict:
    opaque = {
        "driver": CPU,
        "parameters": {"apiVersion": f"{CPU}/v1", "kind": "CPUClaimParameters", **parameters},
    }
    return {"devices": {**spec["devices"], "config": [{"opaque": opaque}]}}


def test_a_cpu_class_rides_on_the_claim_and_is_access_controlled(
    machine: tuple[Path, Topology], tmp_path: Path
) -> None:
    _, topology = machine
    cfg = {
        **config(),
        "cpuClasses": {"turbo": {"minFreq": 2800000, "maxFreq": 3800000}},
        "classAccess": {"cpu": {"turbo": ["ai-*"]}},
    }
    spec = with_parameters(claim_spec(cpus_request(count=2)), cpuClass="turbo")
    docs = [resource_claim("fast", spec, "ai-prod"), resource_claim("slow", spec, "web")]
    _, claims = plan_rows(tmp_path, topology, cfg, docs)
    assert claims["fast"]["cpuClass"] == "turbo" and claims["fast"]["error"] is None
    assert claims["slow"]["cpus"] is None
    assert claims["slow"]["error"] == (
        "claim web/slow: cpuClass turbo is not allowed in namespace web (classAccess.cpu.turbo: "
        "ai-*)"
    )


def test_the_example_templates_of_the_docs_are_allocated(
    machine: tuple[Path, Topology], tmp_path: Path
) -> None:
    """Every ResourceClaimTemplate of docs/dra.md, in the mode it is written for."""
    _, topology = machine
    text = (Path(__file__).parents[2] / "docs" / "dra.md").read_text()
    blocks = [b.split("```", 1)[0] for b in text.split("```yaml\n")[1:]]
    templates = [
        d for d in (yaml.safe_load(b) for b in blocks) if d.get("kind") == "ResourceClaimTemplate"
    ]
    assert len(templates) == 4
    grouped = [t for t in templates if "firstAvailable" in str(t)]
    individual = [t for t in templates if t not in grouped]
    _, claims = plan_rows(tmp_path, topology, config(), [gpu_slice(), GPU_CLASS, *individual])
    four = CPUSet.parse(claims["four-cpus-one-node"]["cpus"])
    assert len(four) == 4 and len({topology.cpus[c].node for c in four}) == 1
    with_gpu = CPUSet.parse(claims["gpu-with-cpus"]["cpus"])
    assert len(with_gpu) == 8 and with_gpu <= NODE2
    # This server has no isolated CPUs: the claim says so, naming its request.
    assert claims["two-isolated"]["error"] == (
        f"claim trading/two-isolated: request 'cpus' asks for 2 devices of class {CPU}: "
        "0 match its selectors, 0 of them free"
    )
    _, claims = plan_rows(tmp_path, topology, config("grouped"), grouped)
    assert claims["six-or-four"]["error"] is None
    assert len(CPUSet.parse(claims["six-or-four"]["cpus"])) == 6
    assert [d["request"] for d in claims["six-or-four"]["devices"]] == ["cpus/six"]


def test_a_capacity_named_otherwise_than_published_is_not_allocated(
    machine: tuple[Path, Topology], tmp_path: Path
) -> None:
    """The scheduler matches a request's capacity name exactly as the device publishes it
    (`cpu`): a name qualified with the driver's domain matches no device, so `plan` must not
    allocate it either."""
    _, topology = machine
    qualified_name = {"capacity": {"requests": {f"{CPU}/cpu": "2"}}}
    docs = [
        template("q", claim_spec(cpus_request(count=1, **qualified_name))),
        pod("p0", using("main", "c"), claims=[{"name": "c", "resourceClaimTemplateName": "q"}]),
    ]
    rows, claims = plan_rows(tmp_path, topology, config("grouped"), docs)
    assert rows[0]["cpus"] is None
    assert claims["p0-c"]["error"] is not None and "capacity" in claims["p0-c"]["error"]
