"""`resource-enforcer check-config`: every problem of a configuration file, by key path, in one run.

Always: syntax and values (as `load_config`), and block-I/O device globs against this
machine's /dev (a named character device or partition is a problem; a glob that matches
nothing is a warning, since one file serves many nodes). With `--sysfs-root`: CPU sets against
that topology. With `--resctrl-root`: the RDT section against that resctrl's hardware (mask
widths, min_cbm_bits, num_closids, CDP, MB and its mode, per-cache-id partition shares).

The hardware checks run on whatever parsed: a section (a `policy` key) with schema problems is
left out of them and said to be; the rest is checked, so one run shows every problem it can.
Problems go to stdout, one line each; warnings and the checks that were skipped to stderr.
"""

from __future__ import annotations

import copy
import sys
from typing import Any

from enforcer.configuration import load_config, parse_config
from enforcer.controllers.base import Roots
from enforcer.controllers.registry import node_controllers
from resource_contract.config import Config, ConfigError
from resource_files.config_file import read_config_data


def check_config(
    path: str,
    *,
    sysfs_root: str | None,
    resctrl_root: str | None,
    cgroupfs_root: str | None = None,
) -> int:
    problems: list[str] = []
    warnings: list[str] = []
    notes: list[str] = []
    config: Config | None = None
    left_out: set[str] = set()
    try:
        config = load_config(path)
    except ConfigError as exc:
        problems = list(exc.problems)
        data = _raw(path)
        if data is not None:  # read and YAML, but not valid: check what is
            config, left_out, found = _valid_part(data)
            problems += [p for p in found if p not in problems]
    else:
        if _raw(path) in (None, {}):
            warnings.append(_empty_file_warning(path, config))
    if config is not None:
        hardware, warned, notes = _hardware_checks(
            config,
            left_out,
            sysfs_root=sysfs_root,
            resctrl_root=resctrl_root,
            cgroupfs_root=cgroupfs_root,
        )
        problems += [p for p in hardware if p not in problems]
        warnings += warned
    for warning in warnings:
        print(f"warning: {warning}", file=sys.stderr)
    for note in notes:
        print(f"note: {note}", file=sys.stderr)
    for problem in problems:
        print(problem)
    if not problems:
        print(f"{path}: valid")
    return 1 if problems else 0


def _raw(path: str) -> Any:
    """The file's YAML, or None when it cannot be read or parsed (load_config said why)."""
    try:
        return read_config_data(path)
    except ConfigError:
        return None


def _valid_part(data: Any) -> tuple[Config | None, set[str], list[str]]:
    """The configuration without what has problems: the offending `policy` keys, whole other
    sections; None when nothing can be salvaged (not a mapping). Also what was left out, and
    the problems found on the way that the schema's first pass could not reach (the sections'
    own checks run only on a configuration whose schema is clean)."""
    if not isinstance(data, dict):
        return None, set(), []
    part = copy.deepcopy(data)
    left_out: set[str] = set()
    found: list[str] = []
    for _ in range(len(part) + len(part.get("policy") or {}) + 1):
        try:
            return parse_config(part), left_out, found
        except ConfigError as exc:
            progress = False
            for problem in exc.problems:
                keys = problem.split(": ", 1)[0].split(".")
                # classAccess names classes of the rdt and blockio sections: with one of them
                # left out, its classes look unconfigured, which is not a problem of the file.
                if not (keys[0] == "classAccess" and len(keys) > 1 and keys[1] in left_out):
                    found.append(problem)
                policy = part.get("policy")
                bad_key = keys[1] if keys[0] == "policy" and len(keys) > 1 else None
                if isinstance(policy, dict) and bad_key in policy:
                    del policy[bad_key]
                    left_out.add(f"policy.{bad_key}")
                    progress = True
                    continue
                if keys[0] in part:
                    del part[keys[0]]
                    left_out.add(keys[0])
                    progress = True
            if not progress:
                break
    return None, left_out, found


def _hardware_checks(
    config: Config,
    left_out: set[str],
    *,
    sysfs_root: str | None,
    resctrl_root: str | None,
    cgroupfs_root: str | None = None,
) -> tuple[list[str], list[str], list[str]]:
    """(problems, warnings, notes on what was skipped and why): each controller checks its own
    section against the hardware it was given."""
    # The cgroup version is read from --cgroupfs-root, else /sys/fs/cgroup: memory classes
    # and CPU burst are refused on cgroup v1 wherever they are read.
    roots = Roots(cgroupfs=cgroupfs_root, sysfs=sysfs_root, resctrl=resctrl_root)
    controllers = node_controllers(roots)
    found = controllers.check(config, left_out=frozenset(left_out))
    return found.problems, found.warnings, found.notes


def _empty_file_warning(path: str, config: Config) -> str:
    policy = config.policy
    return (
        f"{path} is empty: the defaults apply: policy {policy.name} (containers keep the "
        f"cpusets kubelet asks for), no reserved CPUs, no RDT or block-I/O classes, "
        f"reserved namespaces {', '.join(policy.reservedNamespaces) or 'none'}, metrics on "
        f"{config.metrics.address}"
    )
