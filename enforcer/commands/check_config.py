"""`resource-enforcer check-config`: every problem of a configuration file, by key path."""

from __future__ import annotations

from enforcer.config import ConfigError, load_config
from enforcer.policy import resolve_cpu_sets
from enforcer.topology import TopologyError, read_topology


def check_config(path: str, *, sysfs_root: str | None, resctrl_root: str | None) -> int:
    problems: list[str] = []
    try:
        config = load_config(path)
    except ConfigError as exc:
        problems = exc.problems
    else:
        if sysfs_root is not None:
            try:
                resolve_cpu_sets(read_topology(sysfs_root), config.policy)
            except ConfigError as exc:
                problems.extend(exc.problems)
            except TopologyError as exc:
                problems.append(f"--sysfs-root: {exc}")
    for problem in problems:
        print(problem)
    if not problems:
        print(f"{path}: valid")
    return 1 if problems else 0
