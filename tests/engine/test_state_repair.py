"""Damaged state files, kind by kind: each repair is logged with the file, what was wrong and
what was dropped; the damaged file is kept aside; the sound entries survive; the enforcer
comes up (restores and reconciles); a damaged record of kubelet's resources is replaced by the
runtime's own. (`status` over the same files: test_state_status; refusals while the state
cannot be read or written: test_state_unusable.)"""

from __future__ import annotations

import copy
import json
import logging
import re
from collections.abc import Callable
from pathlib import Path

import pytest

from enforcer.cri.convert import record_of, update_request
from enforcer.engine import LiveContainer, Pinning, Recorded
from enforcer.engine.kubelet_record import KubeletRecord
from enforcer.state.encoding import encode_state
from tests.engine.restore_support import (
    NAMES,
    Runtime,
    admitted,
    create,
    create_of,
    edit,
    make,
    nested,
    raw,
    setitem,
)
from tests.support.pods import guaranteed

# (damage, what the log line says was wrong, what it says was dropped, who is still admitted)
KINDS: dict[str, tuple[Callable[[Path], None], str, str, tuple[str, ...]]] = {
    "zero-bytes": (raw(b""), "it is empty (0 bytes)", "all of it", ()),
    "truncated": (raw(lambda b: b[: len(b) // 2]), "it is not JSON", "all of it", ()),
    "not-utf8": (raw(b"\xff\xfe{}"), "it is not JSON", "all of it", ()),
    "top-level-array": (raw(b"[]"), "it holds a JSON array, not an object", "all of it", ()),
    # Once RecursionError: `run` exited at every start, the file never set aside.
    "nested-too-deep-v1": (
        raw(b'{"version":1,"x":' + b"[" * 5000 + b"]" * 5000 + b"}"),
        "nested 5001 levels deep, more than 32",
        "all of it",
        (),
    ),
    "nested-too-deep-checksummed": (
        edit(lambda s: setitem(s, "deep", nested(200))),
        "nested 202 levels deep, more than 32",
        "all of it",
        (),
    ),
    # Bytes changed on the disk that still read as JSON, and well-formed values: once
    # restored as true (a request of 1000m read as 2000m, its CPUs given twice).
    "changed-on-disk": (
        raw(lambda b: b.replace(b'"cpu_request_milli":1000', b'"cpu_request_milli":2000', 1)),
        "its checksum does not match its content",
        "all of it",
        (),
    ),
    "checksum-cut-off": (
        raw(lambda b: re.sub(rb',"crc32":"[0-9a-f]{8}"\}$', b"}", b)),
        "it has no checksum at its end (version 2 ends with one)",
        "all of it",
        (),
    ),
    "other-version": (
        edit(lambda s: setitem(s, "version", 3)),
        "it has version 3, not version 2",
        "all of it",
        (),
    ),
    "policy-missing": (
        edit(lambda s: s.pop("policy")),
        "'policy' is missing or null, not an object",
        "3 of 3 entries",
        (),
    ),
    "containers-missing": (
        edit(lambda s: s.pop("containers")),
        "'containers' is missing or null, not an array",
        "3 of 3 entries",
        (),
    ),
    "admitted-not-an-array": (
        edit(lambda s: setitem(s["policy"], "admitted", {})),
        "'policy.admitted' is {}, not an array",
        "3 of 3 entries",
        (),
    ),
    "entry-not-an-object": (
        edit(lambda s: setitem(s["policy"]["admitted"], 1, 42)),
        "policy entry 2: it is 42, not an object",
        "2 of 6 entries",
        ("first", "third"),
    ),
    "wrong-type-inside": (
        edit(lambda s: setitem(admitted(s, 1)["request"], "cpu_request_milli", "two")),
        "policy entry 2 (e2e/second/app): request.cpu_request_milli is 'two', not an integer",
        "2 of 6 entries",
        ("first", "third"),
    ),
    "field-missing": (
        edit(lambda s: admitted(s, 0)["request"].pop("pod_uid")),
        "policy entry 1 (e2e/first/app): cannot be read (TypeError: ",
        "2 of 6 entries",
        ("second", "third"),
    ),
    "unknown-field": (
        edit(lambda s: setitem(admitted(s, 2)["request"], "colour", "red")),
        "policy entry 3 (e2e/third/app): cannot be read (TypeError: ",
        "2 of 6 entries",
        ("first", "second"),
    ),
    # Once accepted: a request of -1000m, an entry granted -500m of the shared CPUs.
    "negative-count": (
        edit(lambda s: setitem(admitted(s, 1)["request"], "cpu_request_milli", -1000)),
        "policy entry 2 (e2e/second/app): request.cpu_request_milli is -1000, less than 0",
        "2 of 6 entries",
        ("first", "third"),
    ),
    "negative-share": (
        edit(lambda s: setitem(admitted(s, 2), "shared_milli", -500)),
        "policy entry 3 (e2e/third/app): shared_milli is -500, less than 0",
        "2 of 6 entries",
        ("first", "second"),
    ),
    "bad-cpu-list": (
        edit(lambda s: setitem(admitted(s, 0), "exclusive", "1-x")),
        "cannot be read (CpusetError: invalid CPU list '1-x'",
        "2 of 6 entries",
        ("second", "third"),
    ),
    # Once read as other values (["ab"] as the label a=b, [] as no preferences): invented.
    "labels-not-pairs": (
        edit(lambda s: setitem(admitted(s, 0)["request"], "labels", ["ab"])),
        "labels is ['ab'], not a list of [name, value] string pairs",
        "2 of 6 entries",
        ("second", "third"),
    ),
    "preferences-not-an-object": (
        edit(lambda s: setitem(admitted(s, 0)["request"], "preferences", [])),
        "preferences is [], not an object",
        "2 of 6 entries",
        ("second", "third"),
    ),
    "kubelet-cpus-not-a-string": (
        edit(lambda s: setitem(admitted(s, 0)["request"], "kubelet_cpus", 0)),
        "kubelet_cpus is 0, not a string",
        "2 of 6 entries",
        ("second", "third"),
    ),
    "bad-kind": (
        edit(lambda s: setitem(admitted(s, 0), "kind", "greedy")),
        "kind is 'greedy', not 'exclusive' or",
        "2 of 6 entries",
        ("second", "third"),
    ),
    "cpus-held-twice": (
        edit(lambda s: setitem(admitted(s, 1), "exclusive", admitted(s, 0)["exclusive"])),
        "its exclusive CPUs (1) are held by policy entry 1 (e2e/first/app)",
        "2 of 6 entries",
        ("first", "third"),
    ),
    "duplicate-entry": (
        edit(lambda s: s["policy"]["admitted"].append(copy.deepcopy(admitted(s, 0)))),
        "policy entry 4 (e2e/first/app): a second entry for",
        "1 of 7 entries",
        NAMES,
    ),
    "container-wrong-type": (
        edit(lambda s: setitem(s["containers"][1], "container_id", 5)),
        "container_id is 5, not a string or null",
        "2 of 6 entries",
        ("first", "third"),
    ),
    "container-bad-phase": (
        edit(lambda s: setitem(s["containers"][0], "phase", "sleeping")),
        "container entry 1 (",
        "2 of 6 entries",
        ("second", "third"),
    ),
    "container-key-missing": (
        edit(lambda s: s["containers"][2].pop("key")),
        "container entry 3: cannot be read (TypeError",
        "2 of 6 entries",
        ("first", "second"),
    ),
    "container-without-policy-entry": (
        edit(lambda s: s["containers"].append({**s["containers"][0], "key": "gone/app"})),
        "container entry 4 (gone/app): no sound policy entry has its key",
        "1 of 7 entries",
        NAMES,
    ),
    "policy-entry-without-container": (
        edit(lambda s: s["containers"].pop(1)),
        "policy entry 2 (e2e/second/app): no container entry has its key",
        "1 of 5 entries",
        ("first", "third"),
    ),
    "unknown-policy-name": (
        edit(lambda s: setitem(s["policy"], "policy", "greedy")),
        "it names the policy 'greedy', which is unknown",
        "nothing",
        NAMES,
    ),
    "policy-name-not-a-string": (  # once a TypeError: no start, and `status` crashed
        edit(lambda s: setitem(s["policy"], "policy", ["static"])),
        "it names the policy ['static'], which is unknown",
        "nothing",
        NAMES,
    ),
    "topology-missing": (
        edit(lambda s: s.pop("topology")),
        "'topology' is missing or null, not an object",
        "nothing",
        NAMES,
    ),
}


@pytest.mark.parametrize("kind", KINDS)
def test_every_repair_says_what_was_wrong_and_what_was_dropped(
    kind: str, saved: tuple[Path, Runtime], caplog: pytest.LogCaptureFixture
) -> None:
    folder, runtime = saved
    damage, wrong, dropped, kept = KINDS[kind]
    path = folder / "state.json"
    before = {
        a["request"]["pod_name"]: a for a in json.loads(path.read_text())["policy"]["admitted"]
    }
    damage(path)
    e = make(folder, runtime)
    with caplog.at_level(logging.WARNING):
        e.restore_saved()
    (line,) = [r.getMessage() for r in caplog.records if "is corrupt" in r.getMessage()]
    assert line.startswith(f"state file {path} is corrupt: ")
    assert wrong in line and f"dropped {dropped}" in line and f"moved it to {path}.corrupt-" in line
    assert len(list(folder.glob("state.json.corrupt-*"))) == 1
    # The sound entries survive, with the CPUs they held.
    survivors = {a.request.pod_name: a for a in e.policy.admitted.values()}
    assert set(survivors) == set(kept)
    for name in kept:
        assert str(survivors[name].exclusive) == before[name]["exclusive"]
    assert set(e.registry.entries) == set(e.policy.admitted)
    # The enforcer comes up: reconciliation runs, and the state file is whole again.
    e.reconcile()
    again = make(folder, runtime)
    caplog.clear()
    again.restore_saved()
    assert not [r for r in caplog.records if "is corrupt" in r.getMessage()]
    assert set(again.policy.admitted) == set(e.policy.admitted)


def test_a_state_file_written_before_the_checksum_is_read_whole(
    saved: tuple[Path, Runtime], caplog: pytest.LogCaptureFixture
) -> None:
    """An enforcer upgraded over a version-1 state file (no checksum) keeps every entry, and
    its next write has the checksum."""
    folder, runtime = saved
    path = folder / "state.json"
    state = json.loads(path.read_text())
    del state["crc32"]
    state["version"] = 1
    path.write_text(json.dumps(state))
    before = {a["request"]["pod_name"]: a["exclusive"] for a in state["policy"]["admitted"]}
    e = make(folder, runtime)
    with caplog.at_level(logging.WARNING):
        e.restore_saved()
    assert not [r for r in caplog.records if "is corrupt" in r.getMessage()]
    assert {a.request.pod_name: str(a.exclusive) for a in e.policy.admitted.values()} == before
    e.persist()
    assert re.search(rb',"crc32":"[0-9a-f]{8}"\}$', path.read_bytes())
    assert json.loads(path.read_bytes())["version"] == 2


@pytest.mark.parametrize("container_entry", ["kept", "lost"])
def test_a_restarted_container_is_restored_by_its_own_key(
    container_entry: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A container kubelet restarted (attempt 1) is keyed with its attempt; restore pairs its
    policy entry by that key: kept with its CPUs, or, when its container entry is lost, dropped
    and named, and the enforcer still comes up (once it failed to start on such a state)."""
    runtime = Runtime()
    e = make(tmp_path / "state", runtime)
    e.reconciled = True
    create(e, runtime, "first", guaranteed("1"))
    create(e, runtime, "second", guaranteed("1"), attempt=1)
    e.persist()
    path = tmp_path / "state" / "state.json"
    state = json.loads(path.read_text())
    restarted = next(k for k in e.policy.admitted if k.endswith("#1"))
    cpus = str(e.policy.admitted[restarted].exclusive)
    if container_entry == "lost":
        state["containers"] = [c for c in state["containers"] if c["key"] != restarted]
        path.write_bytes(encode_state(state))
    again = make(tmp_path / "state", runtime)
    with caplog.at_level(logging.WARNING):
        again.restore_saved()
    corrupt = [r.getMessage() for r in caplog.records if "is corrupt" in r.getMessage()]
    if container_entry == "kept":
        assert not corrupt
        assert str(again.policy.admitted[restarted].exclusive) == cpus
        assert restarted in again.registry.entries
    else:
        (line,) = corrupt
        assert "policy entry 2 (e2e/second/app): no container entry has its key" in line
        assert "dropped 1 of 3 entries" in line
        assert restarted not in again.policy.admitted
    again.reconcile()


class CriRuntime(Runtime):
    """Re-pins as the CRI client does: the saved record of kubelet's resources converted to
    the UpdateContainerResources call (`enforcer.cri.convert.update_request`); `records`:
    what it recorded of each container at its creation."""

    def __init__(self) -> None:
        super().__init__()
        self.records: dict[str, Recorded] = {}

    def recorded(self, container: LiveContainer) -> Recorded | None:
        return self.records.get(container.id)

    def repin(self, container_id: str, resources: KubeletRecord, pinning: Pinning) -> KubeletRecord:
        return record_of(update_request(container_id, resources, pinning).linux)


@pytest.mark.parametrize("runtime_has_it", [True, False], ids=["runtime-record", "none"])
def test_a_damaged_record_of_kubelets_resources_is_replaced_by_the_runtimes(
    saved: tuple[Path, Runtime], caplog: pytest.LogCaptureFixture, runtime_has_it: bool
) -> None:
    """The record is the transport's, opaque to the state's checks: one the CRI client cannot
    convert is replaced by the runtime's own record of the container, and the re-pin goes on.
    When the runtime has none, that container's re-pin fails (logged, retried), not the next
    decision. Once the conversion's ParseError escaped the engine, and the next container's
    creation failed after containerd had made it (found by
    tests/engine/test_state_damage_properties.py); then the re-pin failed for ever."""
    folder, shared = saved
    path = folder / "state.json"
    kept = json.loads(path.read_text())["containers"][2]["resources"]
    edit(lambda s: setitem(s["containers"][2], "resources", {"cpu_shares": [1]}))(path)
    runtime = CriRuntime()
    runtime.containers = shared.containers
    if runtime_has_it:
        runtime.records["cid-third"] = Recorded(
            create_of("third"), KubeletRecord.from_saved(kept), "", ""
        )
    e = make(folder, runtime)
    e.restore_saved()
    e.reconcile()
    (third,) = [c for c in e.registry.entries.values() if c.container_id == "cid-third"]
    before_cpus = third.applied_cpus
    with caplog.at_level(logging.WARNING):
        create(e, runtime, "fourth", guaranteed("1"))  # the shared pool shrinks: re-pins
    assert len(e.policy.admitted) == 4
    (line,) = [r.getMessage() for r in caplog.records if "cid-third" in r.getMessage()]
    assert "the saved record of kubelet's resources cannot be sent" in line
    assert "cpu_shares" in line
    (third,) = [c for c in e.registry.entries.values() if c.container_id == "cid-third"]
    if runtime_has_it:
        assert "the runtime's own record instead" in line
        assert not e.repin_failed
        # Moved, and sent with the runtime's record, which the registry now keeps.
        sent = third.resources.to_dict()
        assert sent.pop("cpuset_cpus") == third.applied_cpus != before_cpus
        sent.pop("cpuset_mems", None)
        runtimes = KubeletRecord.from_saved(kept).to_dict()
        assert sent == {k: v for k, v in runtimes.items() if not k.startswith("cpuset_")}
        assert third.resources.damage is None
    else:
        assert e.repin_failed
        # Kept as it was saved, never lost: the next write saves it unchanged.
        assert third.resources.to_dict() == {"cpu_shares": [1]}
        assert third.resources.damage is not None and "cpu_shares" in third.resources.damage
