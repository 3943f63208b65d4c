"""The state file's bytes: the state as compact JSON ending with its checksum (`encode_state`),
and read back with the checksum, the bounds and the version checked (`parse_state`); sections
that stand alone carry checksums of their own, so a damaged file still gives them back
(`StateError.salvaged`). Pure: `enforcer.state.store` reads and writes the files."""

from __future__ import annotations

import json
import re
import zlib
from collections.abc import Mapping
from typing import Any

from resource_contract.bounded import BoundError, Limits, check_json_bounds, load_json

FORMAT_VERSION = 2  # 2: the file ends with its checksum; 1 (no checksum) is still read
CHECKSUM_KEY = "crc32"
# The checksum as the file's last key, after the body it covers (whitespace may follow).
_CHECKSUM_TAIL = re.compile(rb',"' + CHECKSUM_KEY.encode() + rb'":"([0-9a-f]{8})"\}\s*\Z')
# Sections that stand alone and that no runtime can tell again (the CPU classes' original
# values): each has its own checksum as well, so a file damaged elsewhere still gives them back.
SALVAGEABLE = ("controllers",)
SECTION_CHECKSUMS = "sectionCrc32"
# The state of a node's containers: some KiB each, a few thousand containers at the very most;
# the format nests 8 levels (containers, an entry, its request, affinity rules, expressions,
# values): a file beyond either bound was never written by the enforcer.
STATE_LIMITS = Limits(max_bytes=64 << 20, max_depth=32)


class StateError(ValueError):
    """A state file that cannot be used, as a read-only caller (`status`) is told; with
    `salvaged`, the sections of it that stand alone and whose own checksums still match."""

    def __init__(self, message: str, salvaged: Mapping[str, Any] | None = None) -> None:
        super().__init__(message)
        self.salvaged: dict[str, Any] = dict(salvaged or {})


def encode_state(data: Mapping[str, Any]) -> bytes:
    """A state file's bytes: `data` as compact JSON, with a CRC-32 of those bytes appended as
    the object's last key (`"crc32":"<8 hex digits>"`; one `data` had is replaced)."""
    fields = {k: v for k, v in data.items() if k not in (CHECKSUM_KEY, SECTION_CHECKSUMS)}
    sections = {k: _section_checksum(fields[k]) for k in SALVAGEABLE if k in fields}
    if sections:
        fields[SECTION_CHECKSUMS] = sections
    body = json.dumps(fields, separators=(",", ":")).encode()
    if not fields:
        return body  # nothing to follow: no version either, which reading names
    return b'%s,"%s":"%08x"}' % (body[:-1], CHECKSUM_KEY.encode(), zlib.crc32(body))


def _section_checksum(value: object) -> str:
    # JSON this module wrote reads back to values that dump to the same bytes.
    return f"{zlib.crc32(json.dumps(value, separators=(',', ':')).encode()):08x}"


def _salvage(body: bytes) -> dict[str, Any]:
    """The sections of a damaged file that stand alone and whose own checksums match."""
    try:
        data = load_json(body, STATE_LIMITS)
    except ValueError:  # BoundError included
        return {}
    sections = data.get(SECTION_CHECKSUMS) if isinstance(data, dict) else None
    if not isinstance(sections, dict):
        return {}
    return {
        k: data[k]
        for k in SALVAGEABLE
        if k in data and sections.get(k) == _section_checksum(data[k])
    }


def parse_state(raw: bytes) -> dict[str, Any]:
    """The state object in a state file's bytes; StateError saying what is wrong with them
    (beyond STATE_LIMITS included: never RecursionError, which would stop every start)."""
    if not raw.strip():
        raise StateError(f"it is empty ({len(raw)} bytes)")
    try:
        check_json_bounds(raw, STATE_LIMITS)
    except BoundError as exc:
        raise StateError(f"it is {exc}" if str(exc).startswith("larger") else str(exc)) from None
    tail = _CHECKSUM_TAIL.search(raw)
    body = raw if tail is None else raw[: tail.start()] + b"}"
    if tail is not None and zlib.crc32(body) != int(tail.group(1), 16):
        raise StateError(
            "its checksum does not match its content (changed after it was written: a damaged "
            "disk block, or an edit)",
            _salvage(body),
        )
    try:
        data = json.loads(body)
    except ValueError as exc:  # UnicodeDecodeError included
        raise StateError(f"it is not JSON ({exc})") from None
    if not isinstance(data, dict):
        raise StateError(f"it holds a JSON {_json_type(data)}, not an object")
    version = data.get("version")
    if type(version) is not int or version not in (1, FORMAT_VERSION):
        found = "no version" if version is None else f"version {version!r}"
        raise StateError(f"it has {found}, not version {FORMAT_VERSION}")
    if version == FORMAT_VERSION and tail is None:
        raise StateError(
            f"it has no checksum at its end (version {FORMAT_VERSION} ends with one)",
            _salvage(body),
        )
    data.pop(CHECKSUM_KEY, None)
    data.pop(SECTION_CHECKSUMS, None)
    return data


def _json_type(value: object) -> str:
    names = {list: "array", str: "string", bool: "boolean", int: "number", float: "number"}
    return "null" if value is None else names.get(type(value), type(value).__name__)
