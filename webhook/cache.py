"""A least-recently-used cache bounded in bytes, not entries: the webhook's memoization.

A pod with 12,000 containers makes a key and a value of megabytes; a cache bounded by its
number of entries (1024 of those) would outgrow the Deployment's memory limit many times over.
Here every entry is charged what its key and value take (`deep_size`), the total stays under
`max_bytes`, the least recently used entries go first, and an entry larger than a quarter of
the budget is not kept at all (it would evict everything else for one pod). Thread-safe: large
reviews are answered on a worker thread while small ones are answered on the event loop.

`SeenBefore` tells a key seen for the first time (lately) from one seen before, so that a
caller keeps only what came twice: the pods of a Deployment's replicas, not the one-off pods
that would only push them out.
"""

from __future__ import annotations

import sys
import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Any

DEFAULT_CACHE_BYTES = 32 * 1024 * 1024
# What an OrderedDict entry costs beyond its key and value (its link and hash slot).
_ENTRY_OVERHEAD = 100


def deep_size(obj: Any) -> int:
    """Bytes taken by `obj` and what it holds: strings, bytes, numbers, (named) tuples and
    dicts, as the cache's keys and values are made of. Shared objects are counted each time
    they appear, so the figure errs on the high side."""
    total = 0
    stack = [obj]
    while stack:
        item = stack.pop()
        total += sys.getsizeof(item)
        if isinstance(item, tuple):
            stack.extend(item)
        elif isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
    return total


class ByteLRU:
    """`get_or_compute(key, compute)` (or `get` and `put`) with the least recently used entries
    evicted first."""

    def __init__(self, max_bytes: int = DEFAULT_CACHE_BYTES) -> None:
        if max_bytes < 0:
            raise ValueError(f"max_bytes must not be negative, not {max_bytes}")
        self.max_bytes = max_bytes
        self._entries: OrderedDict[Hashable, tuple[Any, int]] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()

    @property
    def bytes(self) -> int:
        """What the entries held now are charged."""
        return self._bytes

    def __len__(self) -> int:
        return len(self._entries)

    def get_or_compute(
        self,
        key: Hashable,
        compute: Callable[[], Any],
        key_size: Callable[[Any], int] = deep_size,
    ) -> Any:
        """The cached value for `key`, else `compute()`'s, kept when it fits. An exception from
        `compute` propagates and nothing is kept. `key_size` must give what `deep_size` gives
        for the key (a faster one for a key of known shape)."""
        if self.max_bytes == 0:
            return compute()
        with self._lock:
            found = self._entries.get(key)
            if found is not None:
                self._entries.move_to_end(key)
                return found[0]
        value = compute()  # outside the lock: two threads may compute the same key; both agree
        self.put(key, value, key_size(key) + deep_size(value))
        return value

    def get(self, key: Hashable) -> Any:
        """The value kept for `key` (now the most recently used), or None."""
        # No lock: each of these two steps is atomic under the GIL (a free-threaded Python
        # needs the lock here), and an entry evicted between them by another thread was found
        # all the same. try/except rather than contextlib.suppress: a context manager made
        # for every lookup cost ~0.5 us, and every review does two.
        found = self._entries.get(key)
        if found is None:
            return None
        try:  # noqa: SIM105
            self._entries.move_to_end(key)
        except KeyError:  # evicted by another thread since
            pass
        return found[0]

    def put(self, key: Hashable, value: Any, size: int) -> None:
        """Keeps `value` for `key`, charged `size` bytes (at least what `deep_size` gives for
        the key and the value) plus the entry's own; not kept when that is over a quarter of
        the budget."""
        size += _ENTRY_OVERHEAD
        if size > self.max_bytes // 4:
            return
        with self._lock:
            old = self._entries.pop(key, None)
            if old is not None:
                self._bytes -= old[1]
            self._entries[key] = (value, size)
            self._bytes += size
            while self._bytes > self.max_bytes:
                _, (_, evicted) = self._entries.popitem(last=False)
                self._bytes -= evicted

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
            self._bytes = 0


class SeenBefore:
    """Whether a key's hash was marked before: `slots` bytes, each holding a fingerprint (8
    more bits of the hash) of the last hash marked in it, so that another key in the same slot
    is mistaken for this one only once in 255 times (then a key seen once counts as seen). All
    are cleared after `slots // 4` marks, so that old sightings fade."""

    def __init__(self, slots: int = 1 << 18) -> None:
        if slots <= 0 or slots & (slots - 1):
            raise ValueError(f"slots must be a power of two, not {slots}")
        self._table = bytearray(slots)
        self._mask = slots - 1
        self._shift = slots.bit_length() - 1
        self._marks = 0
        self._limit = slots // 4

    def check_and_mark(self, key_hash: int) -> bool:
        """Whether `key_hash` was marked since the last clearing; marks it."""
        slot = key_hash & self._mask
        fingerprint = (key_hash >> self._shift) % 255 + 1  # never 0, the empty slot's
        if self._table[slot] == fingerprint:
            return True
        if self._marks >= self._limit:
            self._table[:] = bytes(len(self._table))
            self._marks = 0
        self._table[slot] = fingerprint
        self._marks += 1
        return False
