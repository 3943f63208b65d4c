"""Restore: the saved state loaded at the start, before anything else, entry by entry (a damaged
entry costs itself, and the log says what was lost), with what the controllers remembered. Runs
before the worker starts, or on it (taking over from another enforcer).
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from enforcer.engine.model import Entry, Phase
from enforcer.engine.registry import StateWriteFailed
from enforcer.engine.shared import Shared, log
from enforcer.state import check_saved


def restore_saved(s: Shared) -> None:
    """See `Enforcer.restore_saved`."""
    store = s.registry.store
    saved = store.load() if store is not None else None
    if store is None or saved is None:
        if store is not None:
            _restore_salvaged(s, store.salvaged)
        return
    # Entry by entry: a damaged one costs itself, and the log says what was lost.
    checked = check_saved(saved, read_container=Entry.from_dict)
    remembered = saved.get("controllers")
    if s.controllers is not None and isinstance(remembered, Mapping):
        s.controllers.restore(remembered)
    if checked.damage:
        store.move_aside("; ".join(checked.damage), checked.lost)
    try:
        problems = s.registry.restore(
            {**saved, "policy": checked.policy, "containers": checked.containers}
        )
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        # Missed by the checks: treated as corrupt as a whole.
        if not checked.damage:
            store.move_aside(f"unexpected content ({exc!r})", "all of it")
        s.registry = s.new_registry(store)
        return
    for problem in problems:
        log.warning("after the restart, cannot place %s", problem)
    # A creation the last process never saw answered: its settle time runs from now.
    now = s.clock()
    for key, entry in list(s.registry.entries.items()):
        if entry.phase is Phase.UNKNOWN:
            s.registry.entries[key] = replace(entry, unknown_since=now)
    if checked.damage:
        with contextlib.suppress(StateWriteFailed):  # the store says why
            s.persist()  # the repaired state, before anything else can be lost


def _restore_salvaged(s: Shared, salvaged: Mapping[str, Any]) -> None:
    """From a state file set aside as corrupt: what the controllers remembered (the CPU
    classes' original values, which no runtime can tell again), when its own checksum
    still matched."""
    remembered = salvaged.get("controllers")
    if s.controllers is None or not isinstance(remembered, Mapping):
        return
    s.controllers.restore(remembered)
    log.warning(
        "kept what the controllers remembered (%s) from the corrupt state file: that part's "
        "own checksum matches",
        ", ".join(sorted(remembered)) or "nothing",
    )
