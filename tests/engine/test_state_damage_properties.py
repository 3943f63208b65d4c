"""Any damage to a saved state is survivable: states the real engine wrote (state.json and
its journal, through the real StateStore), damaged at random, then read as a node reads them.

What an operator relies on, whatever the damage:
1. the enforcer starts: `restore_saved()` raises nothing. It documents no exception: a state
   it cannot read is recorded in the store's `problem`, and decisions are then refused
   UNAVAILABLE ("deciding blind"); damage costs the damaged entries only, never the whole
   state (its "unexpected content" fallback is never reached);
2. what it keeps is sound: the policy's admitted containers and the registry's entries are
   the same keys, no exclusive CPU is held twice, and every kept entry is one that was
   written undamaged (in the state file or a journal record), as it was written. What the
   format cannot tell from a written value is allowed: a missing field read as its default
   (older states), null or any value of an optional field's type, the transport's opaque
   `resources` record; a change that leaves well-formed values under a matching checksum (a
   writer's bug: a count replaced by another) skips this check. Bytes of state.json changed
   on the disk never do: its checksum finds them, and the whole file is set aside (unless a
   writer's bug seals them under a new checksum afterwards: then they are such a change);
3. `resource-enforcer status` over the damaged folder never raises, exits 0 or 1 (its "cannot
   use the state" exit), and leaves the folder exactly as it was;
4. reconciliation runs, new containers are decided (re-pinning the shared ones), and a second
   restart reads the state back whole, with nothing reported.

The states are made by the engine itself: static, topology-aware and balloons configurations;
Guaranteed containers with exclusive CPUs, shared ones, restarted ones (attempt > 0), several
to a pod, some bound to a container id, some not yet, some cut off and retried by kubelet;
written durably, lazily, or left in the journal by a killed process. The damage: keys deleted
at any depth, values replaced by other JSON types, entries duplicated, dropped or reordered,
keys, attempts and pod UIDs changed so that entries no longer pair, exclusive CPUs given to
two entries, decisions' fields replaced (all these written under a matching checksum, as a
writer's bug would), bytes of state.json and of the journal cut off or overwritten (the
disk's damage), journal records changed under a matching checksum. The runtime is a stand-in
(the engine's port) whose re-pin converts the saved resources with the CRI client's own code.
"""

from __future__ import annotations

import contextlib
import io
import json
import logging
import tempfile
import uuid
import zlib
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, cast

import pytest
from hypothesis import HealthCheck, event, example, given, settings
from hypothesis import strategies as st

from enforcer.commands.status import status
from enforcer.configuration import parse_config
from enforcer.cri import api_pb2
from enforcer.cri.convert import container_create, record_of, update_request
from enforcer.decode import ContainerCreate
from enforcer.decode.request import container_key
from enforcer.engine import Enforcer, Entry, LiveContainer, Pinning
from enforcer.engine.kubelet_record import KubeletRecord
from enforcer.policy import Admitted
from enforcer.refusal import Refusal
from enforcer.state import StateError, StateStore, journal
from enforcer.state.store import JOURNAL_FILE, STATE_FILE, encode_state
from enforcer.topology import Topology
from resource_contract.config import Config
from tests.engine.test_state_repair import Runtime as RestoreRuntime
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
# Each example builds a state with the engine and starts it twice (about 30 ms): together
# well under 20 s on the shared machine. Hunting, raise max_examples (thousands ran clean).
FUZZ = settings(
    max_examples=200,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
BASELINE = settings(FUZZ, max_examples=50)


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


# -- reading it back -----------------------------------------------------------------------


@contextlib.contextmanager
def state_folder() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="statefuzz-") as tmp:
        yield Path(tmp) / "state"


class Logged(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


@contextlib.contextmanager
def logged() -> Iterator[list[str]]:
    handler = Logged()
    logger = logging.getLogger("enforcer")
    logger.addHandler(handler)
    try:
        yield handler.lines
    finally:
        logger.removeHandler(handler)


def restart(folder: Path, runtime: Runtime, config: Config) -> tuple[Enforcer, list[str]]:
    """A new process's start: the saved state read, and what it logged meanwhile."""
    e = enforcer(folder, runtime, config)
    with logged() as lines:
        e.restore_saved()
    return e, lines


def corrupt(lines: list[str]) -> list[str]:
    return [line for line in lines if "is corrupt" in line or "unexpected content" in line]


def files(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


def run_status(folder: Path, output: str) -> tuple[int, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = status(str(folder), output)
    return code, err.getvalue()


def close(e: Enforcer) -> None:
    if e.registry.store is not None:
        e.registry.store.close()


def sound_and_disjoint(e: Enforcer) -> None:
    """The policy and the registry know the same containers; no CPU is exclusive twice."""
    assert set(e.policy.admitted) == set(e.registry.entries)
    held: dict[int, str] = {}
    for key, admitted in e.policy.admitted.items():
        for cpu in admitted.exclusive:
            assert cpu not in held, f"CPU {cpu} is exclusive to {held[cpu]} and {key}"
            held[cpu] = key


def by_key(state: Mapping[str, Any]) -> tuple[dict[str, list[dict]], dict[str, list[dict]]]:
    """A state's policy entries and container entries (as saved), by the key each names."""
    policy = state.get("policy")
    admitted = policy.get("admitted") if isinstance(policy, dict) else None
    decisions: dict[str, list[dict]] = {}
    for data in admitted if isinstance(admitted, list) else []:
        request = data.get("request") if isinstance(data, dict) else None
        if isinstance(request, dict):
            uid, name = request.get("pod_uid"), request.get("container")
            key = container_key(uid, name, request.get("attempt", 0))
            decisions.setdefault(key, []).append(data)
    containers = state.get("containers")
    entries: dict[str, list[dict]] = {}
    for data in containers if isinstance(containers, list) else []:
        if isinstance(data, dict) and isinstance(data.get("key"), str):
            entries.setdefault(data["key"], []).append(data)
    return decisions, entries


def _comparable(entry: Entry) -> dict[str, Any]:
    """What a container entry says that restore must not change (its phase and why it is not
    placed are derived again; its verification is this process's)."""
    data = entry.to_dict()
    # `resources` is the transport's record, opaque to the engine and its checks: damage to
    # it shows where the transport converts it (the stand-in's re-pin, as the CRI client).
    for derived in ("phase", "unplaced", "verified", "problem", "resources"):
        data.pop(derived)
    return data


def _allowed(original: dict[str, Any], damaged: dict[str, Any]) -> dict[str, Any]:
    """The original fields with the damaged copy's changes the format allows (`_readings`)."""
    out = {}
    for key, value in original.items():
        if key not in damaged:
            continue
        if None in (value, damaged[key]):
            out[key] = damaged[key]
        elif isinstance(value, dict) and isinstance(damaged[key], dict):
            out[key] = _allowed(value, damaged[key])
        else:
            out[key] = value
    return out


def _readings(
    original: dict[str, Any], damaged: list[dict], read: Callable[[dict], dict], inner: str | None
) -> list[dict]:
    """The original entry as read, and as read with what a damaged copy of it changes that the
    format allows: a missing field is read as its default (states written before the field
    existed), and an optional field that was or became null may hold null or any value of
    its type (as a string field may hold any string: nothing in the file can tell)."""
    out = [read(original)]
    for copy in damaged:
        present = copy.get(inner) if inner else copy
        if not isinstance(present, dict):
            continue
        fields = _allowed(original[inner] if inner else original, present)
        variant = {**original, inner: fields} if inner else fields
        with contextlib.suppress(Exception):
            out.append(read(variant))
    return out


def nothing_invented(e: Enforcer, written: Mapping[str, Any], damaged: Mapping[str, Any]) -> None:
    """Every kept entry is one that was written undamaged (`written`: a state, or every version
    of its entries), as it was written (what the damage changed that the format allows aside:
    see `_readings`)."""
    decisions, entries = by_key(written)
    damaged_decisions, damaged_entries = by_key(damaged)
    for key, admitted in e.policy.admitted.items():
        assert key in decisions and key in entries, f"{key} was not in the undamaged state"
        requests = [
            reading
            for saved in decisions[key]
            for reading in _readings(
                saved,
                damaged_decisions.get(key, []),
                lambda d: Admitted.from_dict(d).to_dict()["request"],
                "request",
            )
        ]
        assert admitted.to_dict()["request"] in requests, f"{key}'s request changed"
        readings = [
            reading
            for entry in entries[key]
            for reading in _readings(
                entry, damaged_entries.get(key, []), lambda d: _comparable(Entry.from_dict(d)), None
            )
        ]
        assert _comparable(e.registry.entries[key]) in readings, f"{key}'s entry changed"


def everything_written(folder: Path) -> dict[str, Any]:
    """Every version of every entry in an undamaged state folder: the state file's and each
    journal record's (a record lost or applied again brings back an earlier version)."""
    state = json.loads((folder / STATE_FILE).read_bytes())
    admitted, containers = list(state["policy"]["admitted"]), list(state["containers"])
    if (folder / JOURNAL_FILE).exists():
        for record in journal.decode((folder / JOURNAL_FILE).read_bytes()).records:
            admitted += [d for d in record.get("admitted", {}).values() if d is not None]
            containers += [c for c in record.get("containers", {}).values() if c is not None]
    return {"policy": {"admitted": admitted}, "containers": containers}


# -- damage --------------------------------------------------------------------------------

SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-2, 3000),
    st.floats(-1e3, 1e3, allow_nan=False, width=32),
    st.text(max_size=4),
)
VALUES = st.recursive(
    SCALARS,
    lambda inner: st.one_of(
        st.lists(inner, max_size=2), st.dictionaries(st.text(max_size=3), inner, max_size=2)
    ),
    max_leaves=3,
)


def json_type(value: object) -> str:
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"  # an integer field given 1.5 is damage too
    return type(value).__name__


def all_paths(doc: Any, prefix: tuple = ()) -> Iterator[tuple]:
    yield prefix
    if isinstance(doc, dict):
        for key, value in doc.items():
            yield from all_paths(value, (*prefix, key))
    elif isinstance(doc, list):
        for i, value in enumerate(doc):
            yield from all_paths(value, (*prefix, i))


def at(doc: Any, path: tuple) -> Any:
    for step in path:
        doc = doc[step]
    return doc


def damage_json(doc: Any, data: st.DataObject, notes: list[str]) -> Any:
    """One random change of a JSON document; returns the document (the root may change)."""
    paths = list(all_paths(doc))
    # The entries more often than the (large) topology: where most of the checks are.
    entries = [p for p in paths if p[:1] in (("policy",), ("containers",))]
    if entries and data.draw(st.integers(0, 2), label="in the entries") > 0:
        paths = [(), *entries]
    # Lists of entries (a list inside an entry, its labels, is one value: a shorter one is a
    # value like another, which nothing in the file can tell from the one saved).
    lists = [p for p in paths if isinstance(at(doc, p), list) and at(doc, p) and len(p) <= 2]
    ops = ["delete", "retype", "retype"] + (["list"] if lists else [])
    op = data.draw(st.sampled_from(ops), label="json op")
    if op == "list":
        path = data.draw(st.sampled_from(lists), label="list")
        items = at(doc, path)
        how = data.draw(st.sampled_from(["duplicate", "drop", "reorder"]), label="how")
        i = data.draw(st.integers(0, len(items) - 1), label="item")
        if how == "duplicate":
            items.insert(data.draw(st.integers(0, len(items)), label="where"), items[i])
        elif how == "drop":
            del items[i]
        else:
            items[:] = data.draw(st.permutations(items), label="order")
        notes.append(f"{how} {path}[{i}]")
        return doc
    if op == "delete":  # a key, or a whole entry (an item of an entry's list is a value)
        paths = [p for p in paths if p and (isinstance(at(doc, p[:-1]), dict) or len(p) <= 3)]
        if not paths:
            return doc
    path = data.draw(st.sampled_from(paths), label="path")
    if not path:
        new = data.draw(VALUES.filter(lambda v: not isinstance(v, dict)), label="root")
        notes.append(f"root -> {new!r}")
        return new
    parent, last = at(doc, path[:-1]), path[-1]
    if op == "delete":
        del parent[last]
        notes.append(f"delete {path}")
    else:
        kind = json_type(parent[last])
        parent[last] = data.draw(VALUES.filter(lambda v: json_type(v) != kind), label="value")
        notes.append(f"{path} -> {parent[last]!r}")
    return doc


def _items(value: object) -> list[Any]:
    return value if isinstance(value, list) else []


def damage_pairing(doc: dict, data: st.DataObject, notes: list[str]) -> None:
    """Keys, attempts and pod UIDs changed so that entries no longer pair; or one entry's
    exclusive CPUs given to another (on entries still whole enough to have them)."""
    policy = doc.get("policy")
    admitted = policy.get("admitted") if isinstance(policy, dict) else None
    admitted = [a for a in _items(admitted) if isinstance(a, dict)]
    requests = [a["request"] for a in admitted if isinstance(a.get("request"), dict)]
    containers = doc.get("containers")
    keyed = [c for c in _items(containers) if isinstance(c, dict) and isinstance(c.get("key"), str)]
    cpus = [a for a in admitted if isinstance(a.get("exclusive"), str)]
    ops = []
    if [r for r in requests if isinstance(r.get("attempt"), int)]:
        ops.append("attempt")
    if [r for r in requests if isinstance(r.get("pod_uid"), str)]:
        ops.append("pod_uid")
    if keyed:
        ops.append("key")
    if [a for a in cpus if a["exclusive"]] and len(cpus) > 1:
        ops.append("overlap")
    if not ops:
        return
    op = data.draw(st.sampled_from(ops), label="pairing op")
    if op == "key":
        entry = data.draw(st.sampled_from(keyed), label="container entry")
        entry["key"] = data.draw(st.sampled_from([entry["key"] + "#9", "gone/app", ""]))
        notes.append(f"container key -> {entry['key']!r}")
    elif op == "overlap":
        donor = data.draw(st.sampled_from([a for a in cpus if a["exclusive"]]), label="donor")
        taker = data.draw(st.sampled_from([a for a in cpus if a is not donor]), label="taker")
        union = data.draw(st.booleans(), label="union") and taker["exclusive"]
        taker["exclusive"] = donor["exclusive"] + ("," + taker["exclusive"] if union else "")
        notes.append(f"exclusive {taker['exclusive']} given to another entry")
    elif op == "attempt":
        request = data.draw(
            st.sampled_from([r for r in requests if isinstance(r.get("attempt"), int)])
        )
        request["attempt"] += 10  # no such attempt was made: a key nobody has
        notes.append("a policy entry's attempt changed")
    else:
        request = data.draw(
            st.sampled_from([r for r in requests if isinstance(r.get("pod_uid"), str)])
        )
        request["pod_uid"] = str(uuid.uuid5(uuid.NAMESPACE_URL, request["pod_uid"]))
        notes.append("a policy entry's pod UID changed")


CPU_LISTS = ["", "0", "1", "7", "8", "63", "0-7", "1-3", "4095", "1,1", "3-1", " 2 "]
DECISIONS = {  # fields of a decision, which restore decides again from the request
    "exclusive": st.sampled_from(CPU_LISTS),
    "kind": st.sampled_from(["exclusive", "shared", "held", "reserved", "preserved", "balloon"]),
    "pool": st.sampled_from(["root", "shared", "none", "node0", "node1", "work[0]", "gone"]),
    "shared_milli": st.sampled_from([-1000, 0, 1, 999, 10**6, 2**63]),
}
NUMBERS = st.sampled_from([-1000, -1, 0, 1, 500, 1000, 7000, 2**31, 2**63])
WELL_FORMED = {  # values of the right type, which nothing in the file can tell from the saved
    "request": ["cpu_request_milli", "cpu_limit_milli", "memory_request", "memory_limit"],
    "entry": ["applied_cpus", "applied_mems", "container_id", "sandbox_id"],
}


def damage_values(doc: dict, data: st.DataObject, notes: list[str]) -> bool:
    """A value replaced by another of its type: a decision's (restore must decide again from
    the request), or a request's or entry's numbers and names (undetectable: returns True)."""
    policy = doc.get("policy")
    admitted = policy.get("admitted") if isinstance(policy, dict) else None
    decisions = [a for a in _items(admitted) if isinstance(a, dict)]
    containers = doc.get("containers")
    entries = [c for c in _items(containers) if isinstance(c, dict)]
    kinds = ["covered"] + (["decision"] if decisions else []) + (["entry"] if entries else [])
    kinds += ["request"] if [a for a in decisions if isinstance(a.get("request"), dict)] else []
    if not kinds:
        return False
    kind = data.draw(st.sampled_from(kinds), label="value of")
    if kind == "covered":  # the journal records the file holds: older ones applied again
        target, name = doc, "journal"
        doc["journal"] = data.draw(st.integers(0, 12), label="covered")
    elif kind == "decision":
        target = data.draw(st.sampled_from(decisions), label="decision")
        name = data.draw(st.sampled_from(sorted(DECISIONS)), label="field")
        target[name] = data.draw(DECISIONS[name], label="value")
    elif kind == "entry":
        target = data.draw(st.sampled_from(entries), label="entry")
        name = data.draw(st.sampled_from(WELL_FORMED["entry"]), label="field")
        target[name] = data.draw(st.sampled_from([*CPU_LISTS, "cid-0", "sandbox-pod0"]))
    else:
        decision = data.draw(
            st.sampled_from([a for a in decisions if isinstance(a.get("request"), dict)])
        )
        target = decision["request"]
        name = data.draw(st.sampled_from(WELL_FORMED["request"]), label="field")
        target[name] = data.draw(NUMBERS, label="value")
    notes.append(f"{kind} {name} -> {target[name]!r}")
    return kind != "decision"


def damage_bytes(raw: bytes, data: st.DataObject, notes: list[str], name: str) -> bytes:
    if not raw:
        return raw
    how = data.draw(st.sampled_from(["truncate", "overwrite"]), label=f"{name} bytes")
    at_ = data.draw(st.integers(0, len(raw) - 1), label="offset")
    if how == "truncate":
        notes.append(f"{name} cut to {at_} bytes")
        return raw[:at_]
    new = data.draw(st.binary(min_size=1, max_size=3), label="bytes")
    notes.append(f"{name} bytes {at_}: {new!r}")
    return raw[:at_] + new + raw[at_ + len(new) :]


def _json(raw: bytes) -> object:
    try:
        return json.loads(raw)
    except ValueError:
        return None


def damage_journal_record(raw: bytes, data: st.DataObject, notes: list[str]) -> bytes:
    """A record's content damaged, its checksum made to match (a writer's bug, not the
    disk's): the reader must not trust it more than the state file."""
    lines = raw.split(b"\n")
    sound = [i for i, line in enumerate(lines) if isinstance(_json(line[9:]), dict)]
    if not sound:
        return raw
    i = data.draw(st.sampled_from(sound), label="record")
    record = json.loads(lines[i][9:])
    how = data.draw(st.sampled_from(["json", "drop", "duplicate"]), label="record op")
    if how == "drop":
        del lines[i]
    elif how == "duplicate":
        lines.insert(i, lines[i])
    else:
        record = damage_json(record, data, notes)
        body = json.dumps(record, separators=(",", ":")).encode()
        lines[i] = b"%08x %s" % (zlib.crc32(body), body)
    notes.append(f"journal record {i}: {how}")
    return b"\n".join(lines)


def resealed(doc: object) -> bytes:
    """What a writer with a bug would write: `doc` as it is, under a checksum that matches,
    so the entries' own checks are what must find the damage (JSON that is not an object has
    no place for a checksum)."""
    return encode_state(doc) if isinstance(doc, dict) else json.dumps(doc).encode()


def damage(folder: Path, data: st.DataObject) -> tuple[list[str], bool]:
    """Applies one to three random changes to the state folder; returns what they were, and
    whether state.json may now hold different values that are still well-formed under a
    matching checksum (nothing in the file can tell)."""
    notes: list[str] = []
    undetectable = False
    disk_damage = False  # bytes of state.json changed that still read as JSON
    state, journal = folder / STATE_FILE, folder / JOURNAL_FILE
    for _ in range(data.draw(st.integers(1, 3), label="changes")):
        where = ["json", "json", "pairing", "values", "state bytes"]
        if journal.exists() and journal.stat().st_size:
            where += ["journal bytes", "journal record"]
        target = data.draw(st.sampled_from(where), label="target")
        if target in ("json", "pairing", "values"):
            try:
                doc = json.loads(state.read_bytes())
            except ValueError:
                continue  # already not JSON
            if target == "json":
                doc = damage_json(doc, data, notes)
            elif isinstance(doc, dict) and target == "pairing":
                damage_pairing(doc, data, notes)
            elif isinstance(doc, dict):
                undetectable |= damage_values(doc, data, notes)
            state.write_bytes(resealed(doc))
            # Sealed, the disk's change is a value like any other: a string with a byte
            # overwritten (a pod's name, a cgroup parent) reads as one the writer chose.
            undetectable |= disk_damage
        elif target == "state bytes":  # the disk's damage: the checksum finds it
            state.write_bytes(damage_bytes(state.read_bytes(), data, notes, STATE_FILE))
            disk_damage = True
        elif target == "journal bytes":
            journal.write_bytes(damage_bytes(journal.read_bytes(), data, notes, JOURNAL_FILE))
        else:
            journal.write_bytes(damage_journal_record(journal.read_bytes(), data, notes))
    return notes, undetectable


# -- the properties ------------------------------------------------------------------------


RETRIED = Scenario(  # a cut-off creation retried by kubelet, both journaled, then killed
    "static", (Pod("exclusive", 1, False),), (Step(0, 0, 0, True, True, "running"),), "killed"
)


@BASELINE
@given(scenario=scenarios)
@example(scenario=RETRIED)  # once two decisions for one container: reported as corruption
def test_an_undamaged_state_comes_back_whole(scenario: Scenario) -> None:
    """The baseline: every state the engine writes reads back with nothing reported."""
    with state_folder() as folder:
        runtime = build(folder, scenario)
        saved = StateStore(folder).load(move_aside=False)
        assert saved is not None
        e, lines = restart(folder, runtime, CONFIGS[scenario.config])
        assert not corrupt(lines), lines
        keys = {Admitted.from_dict(d).request.key for d in saved["policy"]["admitted"]}
        assert set(e.policy.admitted) == keys
        sound_and_disjoint(e)
        nothing_invented(e, saved, saved)
        close(e)


def read_only(folder: Path) -> Mapping[str, Any]:
    """The state as `status` reads it (journal applied); empty when it cannot be used."""
    try:
        return StateStore(folder).load(move_aside=False) or {}
    except StateError:
        return {}


def next_decisions(e: Enforcer, runtime: Runtime) -> None:
    """What comes next on a node: new containers, whose decisions re-pin the shared ones."""
    for n, kind in enumerate(("exclusive", "burstable")):
        create, record = create_for(10 + n, Pod(kind, 1, False), 0, 0)
        try:
            key, _ = e.create(create, sandbox_id=f"sandbox-new{n}", resources=record)
        except Refusal:
            continue  # no room left
        cid = f"cid-new{n}"
        runtime.containers[cid] = LiveContainer(cid, f"sandbox-new{n}", key, True, exited=False)
        e.created(key, cid)
        e.started(cid)


def survives(
    folder: Path, runtime: Runtime, config: Config, written: Mapping[str, Any], *, exact: bool
) -> list[str]:
    """The four properties over a damaged folder (`exact`: the damage left no well-formed
    value changed, so every kept entry must be one written). Returns what happened, for the
    statistics."""
    damaged = read_only(folder)

    # 3. `status` reads the damaged folder and leaves it as it was.
    before = files(folder)
    for output in ("table", "json"):
        code, err = run_status(folder, output)
        assert code in (0, 1), err
        assert code == 0 or err.rstrip().splitlines()[-1].startswith("cannot use the state")
        assert files(folder) == before

    # 1. The enforcer starts (an unreadable state is a recorded problem, never a raise).
    e, lines = restart(folder, runtime, config)
    seen = [
        f"status exit {code}",
        "restore: " + ("repaired" if corrupt(lines) else "nothing reported"),
        "restore: " + ("kept none" if not e.policy.admitted else "kept some"),
    ]
    # 2. What it keeps is sound, and was in the state before the damage; a damaged entry
    # costs itself, never the whole state.
    sound_and_disjoint(e)
    if exact:
        nothing_invented(e, written, damaged)
    assert not [line for line in lines if "unexpected content" in line], lines

    # 4. Reconciliation runs, and what follows; the next start finds the state whole.
    e.reconcile()
    next_decisions(e, runtime)
    sound_and_disjoint(e)
    kept = {key: str(a.exclusive) for key, a in e.policy.admitted.items()}
    close(e)
    again, lines = restart(folder, runtime, config)
    assert not corrupt(lines), lines
    assert {key: str(a.exclusive) for key, a in again.policy.admitted.items()} == kept
    sound_and_disjoint(again)
    close(again)
    return seen


@FUZZ
@given(scenario=scenarios, data=st.data())
def test_any_damage_is_survivable(scenario: Scenario, data: st.DataObject) -> None:
    with state_folder() as folder:
        runtime = build(folder, scenario)
        written = everything_written(folder)
        notes, undetectable = damage(folder, data)
        print("damage:", notes)  # shown with a failing example
        config = CONFIGS[scenario.config]
        for seen in survives(folder, runtime, config, written, exact=not undetectable):
            event(seen)


def _set(path: tuple, value: object) -> Callable[[Any], None]:
    def change(doc: Any) -> None:
        at(doc, path[:-1])[path[-1]] = value

    return change


def _both(*changes: Callable[[Any], None]) -> Callable[[Any], None]:
    def change(doc: Any) -> None:
        for one in changes:
            one(doc)

    return change


SHARED = Scenario(  # an exclusive and a shared container, bound and running, then written
    "static",
    (Pod("exclusive", 1, False), Pod("burstable", 1, False)),
    (Step(0, 0, 0, False, False, "running"), Step(1, 0, 0, False, False, "running")),
    "persist",
)
ANTI = Scenario(  # a container with an anti-affinity rule: its request saves the rule
    "topology-aware",
    (Pod("besteffort", 2, True),),
    (Step(0, 1, 0, False, False, "running"),),
    "persist",
)
FLUSHED_THEN_JOURNALED = Scenario(  # container entries in the file, records in the journal
    "static",
    (Pod("burstable", 1, False), Pod("besteffort", 1, False)),
    (Step(0, 0, 0, True, False, "running"), Step(1, 0, 1, True, False, "running")),
    "flush",
)
# What the properties found once, each kept here: (scenario, the change made to state.json).
FOUND: dict[str, tuple[Scenario, Callable[[Any], None]]] = {
    # TypeError (unhashable) in check_saved: no start, `status` crashed.
    "policy-name-a-list": (SHARED, _set(("policy", "policy"), ["static"])),
    # TypeError (unhashable) in the journal's replay: no start, `status` crashed.
    "container-key-an-object": (
        FLUSHED_THEN_JOURNALED,
        _both(
            _set(("containers", 0, "key"), {}),
            _set(("journal",), 0),  # the records apply again
        ),
    ),
    # The CRI client's ParseError out of the engine: the next container's creation failed.
    "resources-record-damaged": (SHARED, _set(("containers", 1, "resources", "cpu_shares"), [1])),
    # Read as other values: the label a=b; the rule key "None".
    "labels-not-pairs": (SHARED, _set(("policy", "admitted", 1, "request", "labels"), ["ab"])),
    "affinity-key-null": (
        ANTI,
        _set(("policy", "admitted", 0, "request", "affinity", 0, 1, 0), None),
    ),
    # TypeError in the balloons policy's restore: every entry lost at start, `status` crashed.
    "balloons-not-a-list": (
        replace(SHARED, config="balloons"),
        _set(("policy", "balloons"), 1),
    ),
}


@pytest.mark.parametrize("name", FOUND)
def test_damage_once_found_is_survivable(name: str) -> None:
    scenario, change = FOUND[name]
    with state_folder() as folder:
        runtime = build(folder, scenario)
        written = everything_written(folder)
        state = json.loads((folder / STATE_FILE).read_bytes())
        change(state)
        (folder / STATE_FILE).write_bytes(encode_state(state))
        survives(folder, runtime, CONFIGS[scenario.config], written, exact=True)


class Scripted:
    """The draws of one example, in the order the damage code makes them: replays a case the
    property found through that same code (an `st.data()` cannot be given to `@example`)."""

    def __init__(self, *values: object) -> None:
        self.values = list(values)

    def draw(self, strategy: object, label: object = None) -> object:
        return self.values.pop(0)


def test_disk_damage_sealed_by_a_writer_is_survivable() -> None:
    """Found by the property: a byte of a container's cgroup parent overwritten on the disk,
    then the file edited as JSON and sealed under a matching checksum (a writer's bug). The
    changed parent is then a well-formed value nothing in the file can tell from one written:
    the damage is one whose kept values may differ from the written ones (as `damage_values`'
    are), and everything else holds."""
    with state_folder() as folder:
        runtime = build(folder, SHARED)
        written = everything_written(folder)
        raw = (folder / STATE_FILE).read_bytes()
        at_ = raw.index(b'"cgroup_parent":"/kubepods/pod') + len(b'"cgroup_parent":"/kubepods/')
        admitted = json.loads(raw)["policy"]["admitted"]
        script = Scripted(
            2,  # changes
            *("state bytes", "overwrite", at_, b"X"),  # still JSON, no longer under its checksum
            *("json", 1, "list", ("policy", "admitted"), "reorder", 0, admitted[::-1]),
        )
        notes, undetectable = damage(folder, cast(st.DataObject, script))
        assert not script.values, notes
        assert notes == [f"{STATE_FILE} bytes {at_}: b'X'", "reorder ('policy', 'admitted')[0]"]
        assert undetectable, notes
        survives(folder, runtime, CONFIGS[SHARED.config], written, exact=not undetectable)
