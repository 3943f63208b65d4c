"""The RDT edge: resctrl groups for classes, schemata written, containers' tasks moved in.

One group (folder) per class, named after the class; `system/default` is the root group.
Folder names only ever come from validated class names, and the resolved path must stay a
direct child of the resctrl root. Groups of classes that left the configuration are removed
once no task and no CPU uses them.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Protocol

from enforcer.controllers.cgroups import task_ids
from enforcer.controllers.errors import ApplyError, InvalidClassName, RdtUnavailable, UnknownClass
from enforcer.controllers.rdt.allocation import parse_rdt
from enforcer.controllers.rdt.hardware import ResctrlInfo, read_resctrl_info
from enforcer.controllers.rdt.schemata import RdtPlan, default_schemata, plan_rdt
from enforcer.controllers.rdt.values import ROOT_CLASS
from resource_contract.class_config import RDTConfig
from resource_contract.classes import (
    CLASS_NAME_PATTERN,
    RESCTRL_RESERVED_NAMES,
    reserved_name_problem,
)

log = logging.getLogger(__name__)

_CLASS_NAME = re.compile(CLASS_NAME_PATTERN)
# What the kernel makes in the root group (folders and files); never class groups.
_KERNEL_DIRS = RESCTRL_RESERVED_NAMES
# Rounds of "list the container's threads, move those outside the group" before giving up: each
# round catches the threads forked before their creator moved (later ones inherit its group).
ASSIGN_ROUNDS = 10
# Sub-folders of a container's cgroup (a container may make its own cgroups) read at most.
MAX_CGROUP_DIRS = 1024


class ResctrlFs(Protocol):
    """The three operations the edge performs; a fake stands in for the kernel in tests."""

    def mkdir(self, path: Path) -> None: ...

    def rmdir(self, path: Path) -> None: ...

    def write(self, path: Path, data: str) -> None:
        """One write(2) of `data` (resctrl parses each write on its own)."""
        ...


class KernelResctrlFs:
    def mkdir(self, path: Path) -> None:
        os.mkdir(path, 0o755)

    def rmdir(self, path: Path) -> None:
        os.rmdir(path)

    def write(self, path: Path, data: str) -> None:
        # The kernel parses each write on its own and ignores O_APPEND/O_TRUNC/O_CREAT on these
        # files; the flags make a plain folder standing in for resctrl (a test's or a demo's,
        # in another process) read back what was written: tasks accumulate, schemata replace.
        flags = os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC
        flags |= os.O_APPEND if path.name == "tasks" else os.O_TRUNC
        fd = os.open(path, flags, 0o644)
        try:
            os.write(fd, data.encode())
        finally:
            os.close(fd)


def check_class_name(name: str) -> str:
    """The last guard before a name becomes a folder in resctrl: the contract's pattern, and
    none of the kernel's own names (the configuration and the annotations refuse them first)."""
    if name != ROOT_CLASS and not _CLASS_NAME.fullmatch(name):
        raise InvalidClassName("rdt", name)
    reserved = reserved_name_problem("rdt", name)
    if reserved is not None:
        raise InvalidClassName("rdt", name, reserved)
    return name


class ResctrlGroups:
    """Applies the `rdt:` configuration to resctrl and puts containers' tasks into classes.

    Not thread-safe: the enforcer calls it from one place at a time.
    """

    def __init__(
        self,
        resctrl_root: str | os.PathLike[str] = "/sys/fs/resctrl",
        *,
        fs: ResctrlFs | None = None,
        mount_options: Iterable[str] | None = None,
    ) -> None:
        self.root = Path(resctrl_root)
        self._fs = fs or KernelResctrlFs()
        self._mount_options = set(mount_options) if mount_options is not None else None
        self._info: ResctrlInfo | None = None
        self._unavailable = "RDT is not configured"
        self._classes: frozenset[str] = frozenset()
        self._schemata: dict[str, str] = {}

    # -- state ----------------------------------------------------------------------------

    @property
    def available(self) -> bool:
        """Whether resctrl was usable at the last `configure`."""
        return self._info is not None

    @property
    def classes(self) -> frozenset[str]:
        """Configured class names, `system/default` included when configured."""
        return self._classes

    @property
    def schemata(self) -> dict[str, str]:
        """What the last `configure` wrote, per class."""
        return dict(self._schemata)

    def hardware(self) -> ResctrlInfo:
        """Reads the hardware now. Raises RdtUnavailable."""
        return read_resctrl_info(self.root, options=self._mount_options)

    def group_dir(self, name: str) -> Path:
        """The class's group folder; InvalidClassName for any name that could escape."""
        check_class_name(name)
        if name == ROOT_CLASS:
            return self.root
        path = self.root / name
        real_root = os.path.realpath(self.root)
        if os.path.dirname(os.path.realpath(path)) != real_root or path.name != name:
            raise InvalidClassName("rdt", name)
        return path

    # -- configuration --------------------------------------------------------------------

    def plan(self, config: RDTConfig) -> RdtPlan:
        """What `configure` would write on this machine, without writing it. Raises ConfigError
        when the configuration does not fit the hardware, RdtUnavailable without resctrl."""
        return plan_rdt(parse_rdt(config), self.hardware())

    def configure(self, config: RDTConfig | None) -> list[str]:
        """Makes resctrl match `config`; returns warnings.

        Raises ConfigError (key paths) when the configuration does not fit the hardware and
        ApplyError when the kernel refuses a write. Without resctrl the class names are kept
        (so requests can be told apart) and a warning is returned: explicit requests then fail
        with RdtUnavailable, QoS-class defaults are skipped.
        """
        if config is None:
            self._classes, self._schemata, self._info = frozenset(), {}, None
            self._unavailable = "RDT is not configured"
            return []
        parsed = parse_rdt(config)
        try:
            info = self.hardware()
        except RdtUnavailable as exc:
            self._classes, self._schemata, self._info = frozenset(parsed.classes), {}, None
            self._unavailable = str(exc)
            if not parsed.classes:
                return []
            return [f"rdt: {exc}; RDT classes will be refused when asked for explicitly"]
        plan = plan_rdt(parsed, info)
        writes = dict(plan.schemata)
        if ROOT_CLASS not in writes and ROOT_CLASS in self._schemata:
            # The root group was ours and is no longer configured: give it everything back.
            writes[ROOT_CLASS] = default_schemata(info)
        for name in sorted(writes, key=lambda n: (n != ROOT_CLASS, n)):
            group = self.group_dir(name)
            if name != ROOT_CLASS and not group.is_dir():
                log.debug("rdt: mkdir %s", group)
                try:
                    self._fs.mkdir(group)
                except FileExistsError:
                    pass
                except OSError as exc:
                    raise ApplyError(self._refused(f"mkdir {group}", exc)) from None
            log.debug("rdt: %s/schemata <- %r", group, writes[name])
            try:
                self._fs.write(group / "schemata", writes[name])
            except OSError as exc:
                raise ApplyError(self._refused(f"writing {group}/schemata", exc)) from None
        self._info, self._classes = info, frozenset(plan.schemata)
        self._schemata = dict(plan.schemata)
        return [*plan.warnings, *self.prune()]

    def _refused(self, what: str, exc: OSError) -> str:
        status = ""
        with contextlib.suppress(OSError):
            status = (self.root / "info" / "last_cmd_status").read_text().strip()
        detail = f"{exc.strerror}" + (f" ({status})" if status and status != "ok" else "")
        if exc.errno == errno.ENOSPC:
            detail += "; no CLOS id left (num_closids)"
        return f"resctrl refused {what}: {detail}"

    def prune(self) -> list[str]:
        """Removes groups of classes no longer configured once no task or CPU uses them;
        returns a warning for each one still in use. Call it again later (for example when
        containers stop) to remove those."""
        if self._info is None or not self.root.is_dir():
            return []
        warnings = []
        for entry in sorted(self.root.iterdir()):
            name = entry.name
            if name in _KERNEL_DIRS or name in self._classes or not entry.is_dir():
                continue
            if not _CLASS_NAME.fullmatch(name) or entry.is_symlink():
                continue  # not a folder this controller would have made
            tasks = _read(entry / "tasks")
            cpus = _read(entry / "cpus_list")
            mode = _read(entry / "mode")
            if mode.startswith("pseudo-lock"):
                continue
            if tasks or cpus:
                what = "tasks" if tasks else f"CPUs {cpus}"
                warnings.append(
                    f"rdt: resctrl group {name} belongs to no configured class but still has "
                    f"{what}; it is removed once they are gone"
                )
                continue
            log.info("rdt: removing resctrl group %s: its class is no longer configured", name)
            try:
                self._fs.rmdir(entry)
            except OSError as exc:
                warnings.append(f"rdt: cannot remove resctrl group {name}: {exc.strerror}")
        return warnings

    # -- containers -----------------------------------------------------------------------

    def _target(self, name: str, explicit: bool) -> Path | None:
        check_class_name(name)
        if name not in self._classes:
            if explicit:
                raise UnknownClass("rdt", name, self._classes - {ROOT_CLASS})
            return None
        if self._info is None:
            if explicit:
                raise RdtUnavailable(f'RDT class "{name}" cannot be applied: {self._unavailable}')
            return None
        return self.group_dir(name)

    def check(self, name: str, *, explicit: bool = True) -> bool:
        """What `assign` would do, without moving anything: for CreateContainer, before the
        container has tasks. True: it will be applied; False: skipped quietly; or the errors
        `assign` raises."""
        return self._target(name, explicit) is not None

    def assign(self, name: str, tids: Iterable[int], *, explicit: bool = True) -> bool:
        """Moves tasks (thread ids) into class `name`'s group, one id per write; ids of tasks
        that have exited are skipped. Returns False when skipped quietly: a QoS-class default
        (`explicit=False`) that is not configured, or RDT unavailable. For an explicit request
        those raise UnknownClass or RdtUnavailable; a malformed name raises InvalidClassName.
        """
        group = self._target(name, explicit)
        if group is None:
            return False
        self._write_tasks(group, tids)
        return True

    def assign_cgroup(
        self, name: str, cgroup_dir: str | os.PathLike[str], *, explicit: bool = True
    ) -> bool:
        """`assign` for every thread of a container: every task listed in its cgroup folder and
        the folders under it (`cgroup.threads` in v2, `tasks` in v1), not only its first
        process.

        A thread forked before its creator moved stays in the creator's old group, so this
        goes round: list the container's threads, read the group's own `tasks`, move every
        thread not in it, until a round finds none outside (threads forked after their creator
        moved inherit the group). After ASSIGN_ROUNDS rounds with threads still outside, the
        container forks faster than they can be moved: ApplyError naming how many are left
        (the caller logs and counts it as a failed application).
        """
        group = self._target(name, explicit)
        if group is None:
            return False
        outside: set[int] = set()
        for _ in range(ASSIGN_ROUNDS):
            try:
                threads = container_threads(cgroup_dir)
            except FileNotFoundError:
                return True  # the container has exited
            outside = threads - self.members(group)
            if not outside:
                return True
            self._write_tasks(group, sorted(outside))
        try:
            outside = container_threads(cgroup_dir) - self.members(group)
        except FileNotFoundError:
            return True
        if not outside:
            return True
        listed = ", ".join(str(t) for t in sorted(outside)[:10])
        more = f" and {len(outside) - 10} more" if len(outside) > 10 else ""
        raise ApplyError(
            f'rdt class "{name}": {len(outside)} thread(s) of the container in {cgroup_dir} '
            f"still outside {group} after {ASSIGN_ROUNDS} rounds of moves (threads {listed}"
            f"{more}); it forks faster than its threads can be moved"
        )

    def members(self, group: Path) -> set[int]:
        """Thread ids the group's `tasks` file lists now (the kernel's word on who is in it)."""
        try:
            text = (group / "tasks").read_text()
        except FileNotFoundError:
            return set()
        except OSError as exc:
            raise ApplyError(self._refused(f"reading {group}/tasks", exc)) from None
        return {int(line) for line in text.split() if line.isdigit()}

    def _write_tasks(self, group: Path, tids: Iterable[int]) -> None:
        tasks = group / "tasks"
        ids = [int(tid) for tid in tids]
        log.debug("rdt: moving tasks %s to %s", ids, tasks)
        for tid in ids:
            try:
                self._fs.write(tasks, f"{tid}\n")
            except ProcessLookupError:
                continue  # ESRCH: the task has exited, nothing to move
            except OSError as exc:
                raise ApplyError(self._refused(f"moving task {tid} to {tasks}", exc)) from None


def container_threads(cgroup_dir: str | os.PathLike[str]) -> set[int]:
    """Thread ids in a container's cgroup folder and every folder under it (at most
    MAX_CGROUP_DIRS folders). FileNotFoundError when the folder itself is gone."""
    found = set(task_ids(cgroup_dir))
    pending = [os.fspath(cgroup_dir)]
    seen = 1
    while pending and seen < MAX_CGROUP_DIRS:
        folder = pending.pop()
        try:
            entries = [e for e in os.scandir(folder) if e.is_dir(follow_symlinks=False)]
        except OSError:
            continue  # removed meanwhile
        for entry in entries[: MAX_CGROUP_DIRS - seen]:
            seen += 1
            pending.append(entry.path)
            with contextlib.suppress(OSError):  # FileNotFoundError: removed meanwhile
                found.update(task_ids(entry.path))
    return found


def _read(path: Path) -> str:
    try:
        return path.read_text().strip()
    except OSError:
        return ""
