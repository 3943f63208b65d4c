"""States the real engine writes for the damage properties (test_state_damage_properties):
scenarios of pods and steps, built by the engine into a real state folder."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from pathlib import Path

from hypothesis import strategies as st

from enforcer.configuration import parse_config
from enforcer.cri import api_pb2
from enforcer.cri.convert import container_create, record_of, update_request
from enforcer.decode import ContainerCreate
from enforcer.engine import Enforcer, LiveContainer, Pinning
from enforcer.engine.kubelet_record import KubeletRecord
from enforcer.refusal import Refusal
from enforcer.state import StateStore
from enforcer.topology import Topology
from resource_contract.config import Config
from tests.engine.restore_support import Runtime as RestoreRuntime
from tests.support.kubelet import container_config_for, sandbox_config_for
from tests.support.pods import guaranteed, manifest, sleeper

MACHINE = Topology.synthetic(sockets=1, nodes_per_die=2, cores_per_node=2, threads_per_core=2)
CONFIGS = {  # CPUs 0-7 on two NUMA nodes; CPU 0 reserved: 7 to hand out
    "static": parse_config({"policy": {"name": "static", "reservedCPUs": "0"}}),
    "topology-aware": parse_config({"policy": {"name": "topology-aware", "reservedCPUs": "0"}}),
    "balloons": parse_config(
        {
            "policy": {
                "name": "balloons",
                "reservedCPUs": "0",
                "balloonTypes": [{"name": "work", "minCPUs": 1, "maxCPUs": 4}],
            }
        }
    ),
}
RESOURCES = {
    "exclusive": guaranteed("1"),
    "fraction": guaranteed("500m"),
    "burstable": {"requests": {"cpu": "250m", "memory": "32Mi"}},
    "besteffort": None,
}


class Runtime(RestoreRuntime):
    """The engine's runtime port as restore uses it (these containers run, nothing is recorded
    about them), whose re-pin converts the saved record of kubelet's resources as the CRI
    client does (a record it cannot convert fails there too)."""

    def repin(self, container_id: str, resources: KubeletRecord, pinning: Pinning) -> KubeletRecord:
        return record_of(update_request(container_id, resources, pinning).linux)


# -- the states the engine writes ----------------------------------------------------------


@dataclass(frozen=True)
class Pod:
    kind: str  # a key of RESOURCES: all its containers ask alike (QoS is the pod's)
    containers: int
    anti_affinity: bool  # its second container keeps off its first (topology-aware reads it)


@dataclass(frozen=True)
class Step:
    """One CreateContainer and what became of it."""

    pod: int
    container: int
    attempt: int  # > 0: kubelet restarted the container
    journaled: bool  # decided as the relay does: a journal record, synced while created
    retried: bool  # cut off (outcome unknown), then kubelet's retry of the same attempt
    outcome: str  # running | created | unbound-live (the answer was lost) | unbound-gone


@dataclass(frozen=True)
class Scenario:
    config: str
    pods: tuple[Pod, ...]
    steps: tuple[Step, ...]
    ending: str  # persist (a durable write) | flush (a lazy one) | killed (nothing more)


pods = st.builds(
    Pod,
    kind=st.sampled_from(sorted(RESOURCES)),
    containers=st.integers(1, 3),
    anti_affinity=st.booleans(),
)
steps = st.builds(
    Step,
    pod=st.integers(0, 3),
    container=st.integers(0, 2),
    attempt=st.sampled_from([0, 0, 1, 2]),
    journaled=st.booleans(),
    retried=st.booleans(),
    outcome=st.sampled_from(["running", "running", "created", "unbound-live", "unbound-gone"]),
)
scenarios = st.builds(
    Scenario,
    config=st.sampled_from(sorted(CONFIGS)),
    pods=st.lists(pods, min_size=1, max_size=4).map(tuple),
    steps=st.lists(steps, min_size=1, max_size=8).map(tuple),
    ending=st.sampled_from(["persist", "flush", "killed"]),
)


def create_for(index: int, pod: Pod, container: int, attempt: int) -> tuple[ContainerCreate, dict]:
    """kubelet's CreateContainer for one container of a pod, through the CRI adapter, and the
    relay's record of its resources."""
    name = f"pod{index}"
    uid = str(uuid.uuid5(uuid.NAMESPACE_URL, name))
    containers = [sleeper(f"c{n}", RESOURCES[pod.kind]) for n in range(pod.containers)]
    annotations = None
    if pod.anti_affinity and pod.containers > 1:
        annotations = {"resource-enforcer.dev/anti-affinity": "c1: [c0]"}
    spec = manifest(name, *containers, annotations=annotations)
    config = container_config_for(
        spec, containers[container % pod.containers], uid, attempt, memory_capacity=1 << 34
    )
    request = api_pb2.CreateContainerRequest(
        pod_sandbox_id=f"sandbox-{name}",
        config=config,
        sandbox_config=sandbox_config_for(spec, uid),
    )
    return container_create(request), record_of(config.linux.resources)


def enforcer(folder: Path, runtime: Runtime, config: Config) -> Enforcer:
    store = StateStore(folder)
    store.ensure_dir()
    return Enforcer(topology=MACHINE, config=config, store=store, runtime=runtime)


def build(folder: Path, scenario: Scenario) -> Runtime:
    """Runs the scenario through a started engine; returns the runtime its containers run in."""
    runtime = Runtime()
    e = enforcer(folder, runtime, CONFIGS[scenario.config])
    e.restore_saved()
    e.reconcile()  # a durable write: from here on, the store keeps a journal
    for n, step in enumerate(scenario.steps):
        index = step.pod % len(scenario.pods)
        create, record = create_for(index, scenario.pods[index], step.container, step.attempt)
        sandbox = f"sandbox-pod{index}"
        try:
            key, _ = e.create(
                create, sandbox_id=sandbox, resources=record, sync_later=step.journaled
            )
            if step.retried:
                e.create_failed(key, uncertain=True, details="context deadline exceeded")
                key, _ = e.create(
                    create, sandbox_id=sandbox, resources=record, sync_later=step.journaled
                )
        except Refusal:
            continue  # no room: kubelet's pod fails
        if step.journaled:
            assert e.sync_state() is None
        cid = f"cid-{n}"
        if step.outcome != "unbound-gone":
            running = step.outcome == "running"
            runtime.containers[cid] = LiveContainer(cid, sandbox, key, running, exited=False)
        if step.outcome in ("running", "created"):
            e.created(key, cid)
            if step.outcome == "running":
                e.started(cid)
    if scenario.ending == "persist":
        e.persist()
    elif scenario.ending == "flush":
        e.flush()
    assert e.registry.store is not None
    e.registry.store.close()
    return runtime
