"""RDT allocations as typed values: the proportions, cache and memory-bandwidth allocations and
the parsed `rdt:` section that `allocation` produces and `schemata` reads, with the bit helpers
both use. Pure."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Literal

Level = Literal["L3", "L2"]
LEVELS: tuple[Level, ...] = ("L3", "L2")  # the kernel's order in a schemata file
CacheType = Literal["unified", "code", "data"]
CACHE_TYPES: tuple[CacheType, ...] = ("unified", "code", "data")
ROOT_CLASS = "system/default"  # goresctrl's name for the root resctrl group
CACHE_ID_ALL = "all"
MAX_MBPS = 2**32 - 1  # the kernel's MBA_MAX_MBPS: "no limit" in mba_MBps mode


# -- values ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Percent:
    """`"60%"`: that share of the partition (or of the whole cache, for a partition)."""

    value: int
    path: str = field(default="", compare=False)

    def __str__(self) -> str:
        return f"{self.value}%"


@dataclass(frozen=True)
class PercentRange:
    """`"50-100%"`: that slice of the partition; classes only."""

    low: int
    high: int
    path: str = field(default="", compare=False)

    def __str__(self) -> str:
        return f"{self.low}-{self.high}%"


@dataclass(frozen=True)
class BitMask:
    """`"0xff0"` or `"4-11"`: absolute bits; for a class, relative to its partition's lowest bit."""

    bits: int
    path: str = field(default="", compare=False)

    def __str__(self) -> str:
        return hex(self.bits)


Proportion = Percent | PercentRange | BitMask


@dataclass(frozen=True)
class CacheIdAllocation:
    """The allocation for one cache id: unified, and with CDP optionally code and data."""

    unified: Proportion
    code: Proportion | None = None
    data: Proportion | None = None

    def get(self, kind: CacheType) -> Proportion | None:
        return {"unified": self.unified, "code": self.code, "data": self.data}[kind]

    def effective(self, kind: CacheType) -> Proportion:
        """Code and data fall back to unified, as in goresctrl."""
        return self.get(kind) or self.unified


@dataclass(frozen=True)
class CacheAllocation:
    """`l2Allocation`/`l3Allocation`: the `all` default plus per-cache-id overrides."""

    default: CacheIdAllocation
    overrides: tuple[tuple[frozenset[int], CacheIdAllocation], ...] = ()
    path: str = field(default="", compare=False)

    def at(self, cache_id: int) -> CacheIdAllocation:
        for ids, alloc in self.overrides:
            if cache_id in ids:
                return alloc
        return self.default

    def proportions(self) -> Iterable[Proportion]:
        for alloc in (self.default, *(a for _, a in self.overrides)):
            yield from (p for p in (alloc.unified, alloc.code, alloc.data) if p is not None)


@dataclass(frozen=True)
class MbValue:
    """One `mbAllocation` entry list: a percentage and/or an MBps value (mba_MBps mode)."""

    percent: int | None
    mbps: int | None
    path: str = field(default="", compare=False)


@dataclass(frozen=True)
class MbAllocation:
    default: MbValue
    overrides: tuple[tuple[frozenset[int], MbValue], ...] = ()
    path: str = field(default="", compare=False)

    def at(self, cache_id: int) -> MbValue:
        for ids, value in self.overrides:
            if cache_id in ids:
                return value
        return self.default

    def values(self) -> Iterable[MbValue]:
        return (self.default, *(v for _, v in self.overrides))


@dataclass(frozen=True)
class ParsedClass:
    name: str
    partition: str
    path: str
    cat: Mapping[Level, CacheAllocation | None]
    mb: MbAllocation | None


@dataclass(frozen=True)
class ParsedPartition:
    name: str
    path: str
    cat: Mapping[Level, CacheAllocation | None]
    mb: MbAllocation | None
    classes: tuple[ParsedClass, ...]


@dataclass(frozen=True)
class ParsedRdt:
    """The `rdt:` section, parsed. Partitions are in name order (goresctrl resolves them so)."""

    optional: Mapping[str, bool]  # "L2", "L3", "MB" -> options.<x>.optional
    partitions: tuple[ParsedPartition, ...]

    @property
    def classes(self) -> dict[str, ParsedClass]:
        return {c.name: c for p in self.partitions for c in p.classes}


# -- bit helpers ----------------------------------------------------------------------------


def lowest_bit(mask: int) -> int:
    return (mask & -mask).bit_length() - 1


def is_contiguous(mask: int) -> bool:
    """One block of consecutive 1 bits, as Intel's CAT requires."""
    if mask <= 0:
        return False
    shifted = mask >> lowest_bit(mask)
    return shifted & (shifted + 1) == 0


class Problems(list[str]):
    """Problems as `key.path: message` lines, each once."""

    def add(self, path: str, message: str) -> None:
        line = f"{path}: {message}"
        if line not in self:
            self.append(line)
