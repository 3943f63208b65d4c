"""`resource-enforcer status`: the allocations recorded in a state folder, running or not."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from enforcer.engine import Entry, views_of
from enforcer.policy import make_policy
from enforcer.state import StateError, StateStore, check_saved
from enforcer.topology import Topology
from enforcer.views import placements_report
from resource_contract.config import ConfigError, PolicyConfig


def status(state_dir: str) -> int:
    store = StateStore(state_dir)
    unwritable = folder_problem(store.dir)
    if unwritable:
        print(
            f"warning: the state folder {store.dir} cannot be written ({unwritable}): the "
            "enforcer refuses new containers and resizes until it can; what follows is the "
            "state as last saved",
            file=sys.stderr,
        )
    try:
        saved = store.load(move_aside=False)  # a read-only look: never moves the file
    except StateError as exc:
        print(f"cannot use the state: {exc}", file=sys.stderr)
        return 1
    if saved is None:
        print(
            f"no state in {store.path}: the enforcer has not run with this --state-dir",
            file=sys.stderr,
        )
        return 1
    checked = check_saved(saved, read_container=Entry.from_dict, paired=False)
    for damage in checked.damage:
        print(f"warning: state file {store.path}: {damage}", file=sys.stderr)
    if checked.dropped:
        print(f"warning: not shown: {checked.lost}", file=sys.stderr)
    try:
        topology = Topology.from_dict(saved["topology"])
        policy = make_policy(topology, PolicyConfig.model_validate(saved.get("policyConfig", {})))
    except (ConfigError, KeyError, TypeError, ValueError, AttributeError) as exc:
        print(
            f"cannot use the state: {store.path}: its topology or policy configuration is "
            f"damaged ({type(exc).__name__}: {exc})".replace("\n", " "),
            file=sys.stderr,
        )
        return 1
    policy.restore(checked.policy)
    entries = [Entry.from_dict(e) for e in checked.containers]
    rows = views_of(policy, {e.key: e for e in entries})
    print(f"policy {policy.name}; {topology.describe()}")
    print(
        f"available {policy.available}; reserved {policy.reserved or 'none'}; "
        f"exclusive {policy.taken or 'none'}"
    )
    print()
    print(placements_report(topology, policy, rows))
    return 0


def folder_problem(folder: Path) -> str | None:
    """Why the enforcer could not write in `folder`, seen without writing there (None: it
    could, as far as can be told)."""
    try:
        fs = os.statvfs(folder)
    except OSError:
        return None  # no folder: `load` says so
    if fs.f_flag & os.ST_RDONLY:
        return "Read-only file system (EROFS)"
    # The enforcer runs as root: another user's lack of permission says nothing about it.
    if os.geteuid() == 0 and not os.access(folder, os.W_OK):
        return "Permission denied (EACCES)"
    if fs.f_blocks and fs.f_bfree == 0:
        return "No space left on device (ENOSPC)"
    return None
