"""`resource-enforcer check-config`: every problem of a configuration file, by key path.

Always: syntax and values (as `load_config`), and block-I/O device globs against this
machine's /dev (a named character device or partition is a problem; a glob that matches
nothing is a warning, since one file serves many nodes). With `--sysfs-root`: CPU sets against
that topology. With `--resctrl-root`: the RDT section against that resctrl's hardware (mask
widths, min_cbm_bits, num_closids, CDP, MB and its mode, per-cache-id partition shares).
Problems go to stdout, one line each; warnings to stderr.
"""

from __future__ import annotations

import sys

from enforcer.configuration import load_config
from enforcer.controllers.blockio import compile_classes
from enforcer.controllers.errors import RdtUnavailable
from enforcer.controllers.rdt import plan_rdt, read_resctrl_info
from enforcer.policy import resolve_cpu_sets
from enforcer.topology import TopologyError, read_topology
from resource_contract.config import ConfigError


def check_config(path: str, *, sysfs_root: str | None, resctrl_root: str | None) -> int:
    problems: list[str] = []
    warnings: list[str] = []
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
        if config.blockio is not None:
            try:
                _, found = compile_classes(config.blockio, sysfs_root=sysfs_root or "/sys")
                warnings.extend(found)
            except ConfigError as exc:
                problems.extend(exc.problems)
        if resctrl_root is not None and config.rdt is not None:
            try:
                plan = plan_rdt(config.rdt, read_resctrl_info(resctrl_root))
                warnings.extend(plan.warnings)
            except ConfigError as exc:
                problems.extend(exc.problems)
            except RdtUnavailable as exc:
                problems.append(f"--resctrl-root: {exc}")
    for warning in warnings:
        print(f"warning: {warning}", file=sys.stderr)
    for problem in problems:
        print(problem)
    if not problems:
        print(f"{path}: valid")
    return 1 if problems else 0
