"""CPUSet: an immutable set of CPU (or memory node) ids in the Linux list format."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

from resource_contract.cpusets import MAX_CPU_ID, cpu_ranges

# Linux supports at most 8192 CPUs (NR_CPUS) and 1024 NUMA nodes: the contract's one parser
# (resource_contract.cpusets) refuses any id above.
MAX_ID = MAX_CPU_ID
# Texts of sets printed lately, by set; bounded by the ids the kept sets hold (a 384-CPU set
# takes about 33 KB, so 64 Ki ids are some 6 MB), cleared when full.
_TEXTS: dict[frozenset[int], str] = {}
_MAX_TEXT_IDS = 64 << 10
_text_ids = 0


class CPUSet(frozenset[int]):
    """An immutable set of non-negative ids, printed as a Linux list ("0-3,8,10-11").

    Set operations return CPUSet (not plain frozenset) so results keep printing in list format.
    The same type serves for memory node sets (cpuset.mems uses the same format).
    """

    __slots__ = ()

    def __new__(cls, ids: Iterable[int] = ()) -> CPUSet:
        self = super().__new__(cls, ids)
        for cpu in self:
            # bool is an int, but True/False as CPU ids is always a bug upstream.
            if not isinstance(cpu, int) or isinstance(cpu, bool) or cpu < 0:
                raise ValueError(f"invalid CPU id {cpu!r}: must be a non-negative integer")
        return self

    @classmethod
    def _checked(cls, ids: Iterable[int]) -> CPUSet:
        """Made from ids already checked (those of CPUSets): no second look at each."""
        return frozenset.__new__(cls, ids)

    @classmethod
    def of(cls, *ids: int) -> CPUSet:
        return cls(ids)

    @classmethod
    def parse(cls, text: str) -> CPUSet:
        """Parse the Linux list format (`resource_contract.cpusets`: the one parser of every
        reader); surrounding whitespace and newlines are tolerated. ValueError (CpusetError)
        saying what is wrong."""
        ranges = cpu_ranges(text)
        if not ranges:
            return _EMPTY
        if len(ranges) == 1:
            return cls._checked(ranges[0])
        return cls._checked(i for r in ranges for i in r)

    def sorted(self) -> list[int]:
        return sorted(self)

    def ranges(self) -> Iterator[tuple[int, int]]:
        """Maximal runs of consecutive ids as inclusive (first, last) pairs, ascending."""
        it = iter(sorted(self))
        try:
            first = last = next(it)
        except StopIteration:
            return
        for cpu in it:
            if cpu != last + 1:
                yield first, last
                first = cpu
            last = cpu
        yield first, last

    def __str__(self) -> str:
        # The same few sets (a pool, a container's CPUs) are printed over and over, for every
        # container at every re-pin check: each text is made once.
        global _text_ids
        text = _TEXTS.get(self)
        if text is None:
            text = ",".join(str(a) if a == b else f"{a}-{b}" for a, b in self.ranges())
            if _text_ids + len(self) > _MAX_TEXT_IDS:
                _TEXTS.clear()
                _text_ids = 0
            _TEXTS[self] = text
            _text_ids += len(self) + 1
        return text

    def __repr__(self) -> str:
        return f"CPUSet({str(self)!r})"

    # frozenset's operators build a plain frozenset; wrap them so the type survives. Other
    # operands are left to their own reflected operation, as frozenset does.
    # Results made only of ids from CPUSets are not checked again (a subset of self, or
    # both operands CPUSets): set algebra on a 768-CPU machine stays at C speed.
    def __or__(self, other: Any) -> CPUSet:
        if isinstance(other, CPUSet):
            return CPUSet._checked(frozenset.__or__(self, other))
        if not isinstance(other, set | frozenset):
            return NotImplemented
        return CPUSet(frozenset.__or__(self, other))

    def __and__(self, other: Any) -> CPUSet:
        if not isinstance(other, set | frozenset):
            return NotImplemented
        return CPUSet._checked(frozenset.__and__(self, other))

    def __sub__(self, other: Any) -> CPUSet:
        if not isinstance(other, set | frozenset):
            return NotImplemented
        return CPUSet._checked(frozenset.__sub__(self, other))

    def __xor__(self, other: Any) -> CPUSet:
        if isinstance(other, CPUSet):
            return CPUSet._checked(frozenset.__xor__(self, other))
        if not isinstance(other, set | frozenset):
            return NotImplemented
        return CPUSet(frozenset.__xor__(self, other))

    __ror__ = __or__
    __rand__ = __and__
    __rxor__ = __xor__

    def __rsub__(self, other: Any) -> CPUSet:
        if not isinstance(other, set | frozenset):
            return NotImplemented
        return CPUSet(i for i in other if i not in self)

    def union(self, *others: Iterable[Any]) -> CPUSet:
        merged = frozenset.union(self, *others)
        if all(isinstance(o, CPUSet) for o in others):
            return CPUSet._checked(merged)
        return CPUSet(merged)

    def intersection(self, *others: Iterable[Any]) -> CPUSet:
        return CPUSet._checked(frozenset.intersection(self, *others))

    def difference(self, *others: Iterable[Any]) -> CPUSet:
        return CPUSet._checked(frozenset.difference(self, *others))

    def symmetric_difference(self, other: Iterable[Any]) -> CPUSet:
        return CPUSet(frozenset.symmetric_difference(self, other))

    def copy(self) -> CPUSet:
        return self

    def __reduce__(self) -> tuple[Any, ...]:
        return (CPUSet, (sorted(self),))


_EMPTY = frozenset.__new__(CPUSet)
