"""Reading a damaged state back, for the damage properties (test_state_damage_properties):
restarts, status runs, and the checks that what is kept is sound and was written."""

from __future__ import annotations

import contextlib
import io
import json
import logging
import tempfile
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

from enforcer.commands.status import status
from enforcer.decode.request import container_key
from enforcer.engine import Enforcer, Entry
from enforcer.policy import Admitted
from enforcer.state import journal
from enforcer.state.store import JOURNAL_FILE, STATE_FILE
from resource_contract.config import Config
from tests.engine.damage_states import (
    Runtime,
    enforcer,
)


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
