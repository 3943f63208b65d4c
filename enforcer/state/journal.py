"""The state journal's records: one change of the registry per line, checked by a CRC.

A record carries what one change (a container admitted) touched, by container key: its
registry entry and its policy decision (None: gone), and the policy's small header (its name,
the balloons). Records are numbered; a state file says up to which number it holds them
(`journal` in the file), so replaying skips older records and applies newer ones in order.

A line is `<crc32 of the JSON, 8 hex digits> <JSON>\n`. Reading stops at the first line that
is not a whole, sound record: a write cut off by a crash, or blocks a power cut left
unwritten. No I/O here: the store reads and writes the file.
"""

from __future__ import annotations

import json
import zlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from enforcer.decode.request import container_key
from resource_contract.bounded import BoundError, Limits, load_json

# Records, and the keys they touch, that a journal may hold: a bound on what a damaged or
# planted file can make the reader build.
MAX_RECORD_BYTES = 1 << 20
# A record nests as the state file does (enforcer.state.encoding.STATE_LIMITS).
RECORD_LIMITS = Limits(max_bytes=MAX_RECORD_BYTES, max_depth=32)


@dataclass(frozen=True)
class Read:
    """What a journal's bytes hold: its sound records in order, and what followed them."""

    records: list[dict[str, Any]]
    rest: int  # bytes after the last sound record (0: the file ends with one)
    why: str = ""  # why the rest is not a record


def encode(record: Mapping[str, Any], seq: int) -> bytes:
    """One record as a journal line, numbered `seq`."""
    body = json.dumps({**record, "seq": seq}, separators=(",", ":")).encode()
    return b"%08x %s\n" % (zlib.crc32(body), body)


def decode(raw: bytes) -> Read:
    """The sound records at the start of a journal's bytes; stops at the first that is not
    one (torn, corrupt, out of order)."""
    records: list[dict[str, Any]] = []
    pos = 0
    last = -1
    while pos < len(raw):
        end = raw.find(b"\n", pos, pos + MAX_RECORD_BYTES + 10)
        if end < 0:
            return Read(records, len(raw) - pos, "an unfinished record")
        line = raw[pos:end]
        why = _check(line, last)
        if isinstance(why, str):
            return Read(records, len(raw) - pos, why)
        records.append(why)
        last = why["seq"]
        pos = end + 1
    return Read(records, 0)


def _check(line: bytes, last: int) -> dict[str, Any] | str:
    """The record on a line, or why it is not a sound one."""
    if len(line) < 10 or line[8:9] != b" ":
        return "a line that is not a record"
    body = line[9:]
    try:
        crc = int(line[:8], 16)
    except ValueError:
        return "a line that is not a record"
    if zlib.crc32(body) != crc:
        return "a record whose checksum does not match"
    try:
        record = load_json(body, RECORD_LIMITS)
    except BoundError as exc:
        return f"a record {exc}"
    except ValueError:
        return "a record that is not JSON"
    if not isinstance(record, dict):
        return "a record that is not an object"
    seq = record.get("seq")
    if not isinstance(seq, int) or isinstance(seq, bool) or seq <= last:
        return "a record out of order"
    for part in ("containers", "admitted"):
        if not isinstance(record.get(part, {}), dict):
            return f"a record whose {part} is not an object"
    if not isinstance(record.get("policy", {}), dict):
        return "a record whose policy is not an object"
    return record


def apply(state: dict[str, Any], records: list[dict[str, Any]], after: int) -> int:
    """Applies the records numbered above `after` to a state file's object, in order; returns
    the number of the last one applied (`after` when none). Entries the state holds in a shape
    that names no key are left for the state's own checks."""
    last = after
    for record in records:
        if record["seq"] <= last:
            continue
        containers = state.get("containers")
        if isinstance(containers, list):
            state["containers"] = _replace(containers, record.get("containers", {}), _entry_key)
        policy = state.get("policy")
        if isinstance(policy, dict):
            admitted = policy.get("admitted")
            if isinstance(admitted, list):
                policy["admitted"] = _replace(admitted, record.get("admitted", {}), _decision_key)
            policy.update(record.get("policy", {}))
        last = record["seq"]
    return last


def _replace(items: list[Any], changes: Mapping[str, Any], key_of: Any) -> list[Any]:
    if not changes:
        return items
    kept = [item for item in items if key_of(item) not in changes]
    kept.extend(value for value in changes.values() if value is not None)
    return kept


def _entry_key(item: Any) -> str | None:
    key = item.get("key") if isinstance(item, dict) else None
    return key if isinstance(key, str) else None  # another shape is left for the checks


def _decision_key(item: Any) -> str | None:
    """A saved decision's key: its request's, made as the request makes it (a saved request
    holds the key's parts, not the key)."""
    request = item.get("request") if isinstance(item, dict) else None
    if not isinstance(request, dict):
        return None
    uid, name, attempt = request.get("pod_uid"), request.get("container"), request.get("attempt", 0)
    if not (isinstance(uid, str) and isinstance(name, str)):
        return None
    if not isinstance(attempt, int) or isinstance(attempt, bool):
        return None
    return container_key(uid, name, attempt)
