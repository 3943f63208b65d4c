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

import json
from collections.abc import Callable, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any, cast

import pytest
from hypothesis import HealthCheck, event, example, given, settings
from hypothesis import strategies as st

from enforcer.engine import Enforcer, LiveContainer
from enforcer.policy import Admitted
from enforcer.refusal import Refusal
from enforcer.state import StateError, StateStore
from enforcer.state.encoding import encode_state
from enforcer.state.store import STATE_FILE
from resource_contract.config import Config
from tests.engine.damage_kinds import (
    at,
    damage,
)
from tests.engine.damage_reading import (
    close,
    corrupt,
    everything_written,
    files,
    nothing_invented,
    restart,
    run_status,
    sound_and_disjoint,
    state_folder,
)
from tests.engine.damage_states import (
    CONFIGS,
    Pod,
    Runtime,
    Scenario,
    Step,
    build,
    create_for,
    scenarios,
)

# Each example builds a state with the engine and starts it twice (about 30 ms): together
# well under 20 s on the shared machine. Hunting, raise max_examples (thousands ran clean).
FUZZ = settings(
    max_examples=200,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
BASELINE = settings(FUZZ, max_examples=50)


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
