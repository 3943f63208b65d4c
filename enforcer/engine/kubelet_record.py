"""The registry's record of what kubelet asked the runtime for a container, in no transport's terms.

A re-pin sends kubelet's Linux resources back whole with the new cpuset, so that the runtime
never sees a zero it could take literally; each transport converts this record to and from its
own messages (CRI's LinuxContainerResources, NRI's LinuxResources). The record is saved in the
state file under our own field names (`to_dict`). `from_saved` also reads the form written
before this record existed: CRI's LinuxContainerResources as protobuf JSON (proto field names,
64-bit integers as strings), which both transports saved. A saved record that cannot be read is
kept as it was, with the reason (`damage`): the transport refuses to send it and the engine takes
the runtime's own record instead (`RecordUnusable`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

# Our field -> the same field in the old saved form (CRI's proto field name), where they differ.
_OLD_NAMES = {
    "memory_limit": "memory_limit_in_bytes",
    "memory_swap_limit": "memory_swap_limit_in_bytes",
}
_INTEGERS = ("cpu_period", "cpu_quota", "cpu_shares", "memory_limit", "memory_swap_limit")
_STRINGS = ("cpuset_cpus", "cpuset_mems")
_KNOWN = frozenset(
    (*_INTEGERS, "oom_score_adj", *_STRINGS, "hugepage_limits", "unified", *_OLD_NAMES.values())
)
_MAX_ENTRIES = 256  # hugepage sizes and unified keys: a node has a handful


@dataclass(frozen=True)
class KubeletRecord:
    """kubelet's Linux resources for one container, as it asked for them (0 or empty: unset)."""

    cpu_period: int = 0
    cpu_quota: int = 0
    cpu_shares: int = 0
    memory_limit: int = 0
    memory_swap_limit: int = 0
    oom_score_adj: int = 0
    cpuset_cpus: str = ""
    cpuset_mems: str = ""
    hugepage_limits: tuple[tuple[str, int], ...] = ()  # (page size such as "2MB", bytes)
    unified: tuple[tuple[str, str], ...] = ()  # cgroup v2 file -> value
    # Why a saved record could not be read, and the record as it was saved (kept, not lost).
    damage: str | None = None
    saved: Mapping[str, Any] = field(default_factory=dict, compare=False)

    def pinned(self, cpus: str, mems: str) -> KubeletRecord:
        """The record as a re-pin sends it: with this cpuset and these memory nodes ("" keeps
        the record's own)."""
        return replace(
            self, cpuset_cpus=cpus or self.cpuset_cpus, cpuset_mems=mems or self.cpuset_mems
        )

    def to_dict(self) -> dict[str, Any]:
        """The saved form: our field names, unset fields left out (a damaged record as saved)."""
        if self.damage is not None:
            return dict(self.saved)
        data: dict[str, Any] = {}
        for name in (*_INTEGERS, "oom_score_adj", *_STRINGS):
            if value := getattr(self, name):
                data[name] = value
        if self.hugepage_limits:
            data["hugepage_limits"] = [[size, limit] for size, limit in self.hugepage_limits]
        if self.unified:
            data["unified"] = dict(self.unified)
        return data

    @classmethod
    def from_saved(cls, data: object) -> KubeletRecord:
        """The record from its saved form, ours or the old CRI JSON; one that cannot be read is
        kept as saved, with its `damage` naming the field and what is wrong with it."""
        if not isinstance(data, Mapping):
            return cls(damage=f"the record is {type(data).__name__}, not an object", saved={})
        try:
            return cls(**_fields(data))
        except ValueError as exc:
            return cls(damage=str(exc), saved=dict(data))


def _integer(name: str, value: object) -> int:
    # The old form wrote 64-bit integers as decimal strings (protobuf JSON).
    if isinstance(value, str) and value.lstrip("-").isdigit() and len(value) <= 20:
        value = int(value)
    if type(value) is not int or not -(1 << 63) <= value < (1 << 63):
        raise ValueError(f"{name!r} is {value!r}, not a 64-bit integer")
    return value


def _string(name: str, value: object) -> str:
    if not isinstance(value, str):
        raise ValueError(f"{name!r} is {value!r}, not a string")
    return value


def _hugepages(value: object) -> tuple[tuple[str, int], ...]:
    if not isinstance(value, list) or len(value) > _MAX_ENTRIES:
        raise ValueError(f"'hugepage_limits' is {value!r}, not a list of (page size, limit)")
    limits = []
    for item in value:
        if isinstance(item, Mapping):  # the old form: {"page_size": ..., "limit": ...}
            size, limit = item.get("page_size", ""), item.get("limit", 0)
        elif isinstance(item, list) and len(item) == 2:
            size, limit = item
        else:
            raise ValueError(f"'hugepage_limits' holds {item!r}, not a (page size, limit)")
        limits.append(
            (_string("hugepage_limits.page_size", size), _integer("hugepage_limits.limit", limit))
        )
    return tuple(limits)


def _unified(value: object) -> tuple[tuple[str, str], ...]:
    if not isinstance(value, Mapping) or len(value) > _MAX_ENTRIES:
        raise ValueError(f"'unified' is {value!r}, not an object of cgroup files")
    return tuple((_string("unified", k), _string(f"unified.{k}", v)) for k, v in value.items())


def _fields(data: Mapping[str, Any]) -> dict[str, Any]:
    found: dict[str, Any] = {}
    for name in (*_INTEGERS, "oom_score_adj"):
        key = name if name in data else _OLD_NAMES.get(name, name)
        if key in data:
            found[name] = _integer(key, data[key])
    for name in _STRINGS:
        if name in data:
            found[name] = _string(name, data[name])
    if "hugepage_limits" in data:
        found["hugepage_limits"] = _hugepages(data["hugepage_limits"])
    if "unified" in data:
        found["unified"] = _unified(data["unified"])
    if unknown := sorted(str(k) for k in data if k not in _KNOWN):
        raise ValueError(f"unknown fields {', '.join(map(repr, unknown))}")
    return found
