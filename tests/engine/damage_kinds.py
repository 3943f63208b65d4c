"""Damage to a saved state, for the damage properties (test_state_damage_properties): JSON
changed under a matching checksum (a writer's bug), and bytes changed on the disk."""

from __future__ import annotations

import json
import uuid
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from hypothesis import strategies as st

from enforcer.state.encoding import encode_state
from enforcer.state.store import JOURNAL_FILE, STATE_FILE

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
