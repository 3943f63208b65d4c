"""Block-I/O classes: I/O scheduler weights and throttling per class, per device.

The configuration is goresctrl's (`blockio: {Classes: {NAME: [entries]}}`). Its pieces:

- `check_blockio`: syntax and ranges, on any machine (run by `parse_config`).
- `resolve_devices`: device globs -> whole-disk block devices, through symlinks (an edge that
  reads /dev and sysfs). Named character devices and partitions are refused; glob matches of
  those are skipped with a warning, so `/dev/disk/by-id/*SSD*` keeps working.
- `compile_classes`: configuration -> `BlockIOClass` (settings per major:minor; for the same
  device later entries win, setting by setting).
- `read_cgroup_io` (edge, reads) and `plan_writes` (pure): which file gets which line in a
  container's cgroup, v1 or v2 as found; `apply_writes` (edge) writes them. A weight the device
  cannot take (its scheduler is not bfq: EOPNOTSUPP/EINVAL) is a warning, not an error.
- `BlockIOController`: the state the enforcer keeps between configuration and containers.
"""

from __future__ import annotations

import errno
import glob
import logging
import math
import os
import re
import stat
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

from enforcer.controllers.cgroups import cgroup_path, cgroup_version
from enforcer.controllers.errors import (
    ApplyError,
    BlockIOUnavailable,
    InvalidClassName,
    UnknownClass,
)
from resource_contract.class_config import BlockIOConfig
from resource_contract.classes import CLASS_NAME_PATTERN
from resource_contract.config import ConfigError
from resource_contract.quantities import parse_quantity
from resource_files.reads import read_value_file

WEIGHT_MIN, WEIGHT_MAX = 10, 1000
# Config key -> DeviceSettings attribute, v1 file, v2 io.max key.
THROTTLES: tuple[tuple[str, str, str, str], ...] = (
    ("ThrottleReadBps", "read_bps", "blkio.throttle.read_bps_device", "rbps"),
    ("ThrottleWriteBps", "write_bps", "blkio.throttle.write_bps_device", "wbps"),
    ("ThrottleReadIOPS", "read_iops", "blkio.throttle.read_iops_device", "riops"),
    ("ThrottleWriteIOPS", "write_iops", "blkio.throttle.write_iops_device", "wiops"),
)
_CLASS_NAME = re.compile(CLASS_NAME_PATTERN)
log = logging.getLogger(__name__)
# A weight the device or cgroup cannot take: reported, never fatal.
_WEIGHT_ERRNOS = frozenset(
    {errno.EOPNOTSUPP, errno.ENOTSUP, errno.EINVAL, errno.ENODEV, errno.ERANGE, errno.ENOENT}
)


# -- values ---------------------------------------------------------------------------------


@dataclass(frozen=True, order=True)
class BlockDevice:
    major: int
    minor: int
    path: str = field(default="", compare=False)

    @property
    def key(self) -> str:
        return f"{self.major}:{self.minor}"


@dataclass(frozen=True)
class DeviceSettings:
    device: BlockDevice
    weight: int | None = None
    read_bps: int | None = None
    write_bps: int | None = None
    read_iops: int | None = None
    write_iops: int | None = None

    @property
    def throttled(self) -> bool:
        return any(getattr(self, attr) is not None for _, attr, _, _ in THROTTLES)


@dataclass(frozen=True)
class BlockIOClass:
    name: str
    weight: int | None = None  # the default weight, v1 scale (10-1000)
    devices: tuple[DeviceSettings, ...] = ()  # in major:minor order


def v2_weight(weight: int) -> int:
    """A v1 weight (10-1000) on cgroup v2's io.weight scale (1-10000), as runc maps it."""
    return 1 + (weight - 10) * 9999 // 990


def quantity_value(raw: Any) -> int:
    """A Kubernetes quantity as an integer, rounded up like resource.Quantity.Value()."""

    if isinstance(raw, bool):
        raise ValueError(f"{raw!r} is not a quantity")
    return math.ceil(parse_quantity(raw))


# -- syntax (any machine) -------------------------------------------------------------------


def _check_glob(pattern: Any, path: str, out: list[str]) -> None:
    if not isinstance(pattern, str) or not pattern:
        out.append(f"{path}: must be a device path or glob such as /dev/sd[a-z]")
    elif not pattern.startswith("/"):
        out.append(f'{path}: "{pattern}" must be an absolute path such as /dev/vda')
    elif pattern.count("[") != pattern.count("]"):
        out.append(f'{path}: "{pattern}" is not a valid glob (unbalanced [ ])')


def check_blockio(config: BlockIOConfig | None) -> list[str]:
    """Problems of the `blockio:` section that hold on any machine, with key paths."""
    out: list[str] = []
    if config is None:
        return out
    for name, entries in config.Classes.items():
        for index, entry in enumerate(entries or ()):
            base = f"blockio.Classes.{name}.{index}"
            if entry.Weight is not None:
                try:
                    weight = quantity_value(entry.Weight)
                except (ValueError, ArithmeticError):
                    out.append(f'{base}.Weight: "{entry.Weight}" is not a number')
                else:
                    if not WEIGHT_MIN <= weight <= WEIGHT_MAX:
                        out.append(
                            f"{base}.Weight: {entry.Weight} is outside {WEIGHT_MIN}-{WEIGHT_MAX}"
                        )
            throttles = []
            for key, _, _, _ in THROTTLES:
                raw = getattr(entry, key)
                if raw is None:
                    continue
                throttles.append(key)
                try:
                    value = quantity_value(raw)
                except (ValueError, ArithmeticError):
                    out.append(
                        f'{base}.{key}: "{raw}" is not a Kubernetes quantity such as 50M or 10k'
                    )
                    continue
                if value < 0:
                    out.append(f"{base}.{key}: {raw} is negative")
            if entry.Devices is None:
                if throttles:
                    out.append(
                        f"{base}: {', '.join(throttles)} without Devices: throttling is set per "
                        "device; list the devices (an entry without Devices sets only the "
                        "default Weight)"
                    )
            elif not entry.Devices:
                out.append(
                    f"{base}.Devices: empty; list devices, or leave Devices out to set the "
                    "default Weight"
                )
            else:
                for j, pattern in enumerate(entry.Devices):
                    _check_glob(pattern, f"{base}.Devices.{j}", out)
    return out


# -- devices (reads /dev and sysfs) ---------------------------------------------------------


def _python_glob(pattern: str) -> str:
    """Go's filepath.Match syntax (goresctrl) -> Python's: [^x] negates, \\x escapes."""
    out = []
    i = 0
    while i < len(pattern):
        ch = pattern[i]
        if ch == "\\" and i + 1 < len(pattern):
            out.append(glob.escape(pattern[i + 1]))
            i += 2
            continue
        if ch == "[" and pattern[i + 1 : i + 2] == "^":
            out.append("[!")
            i += 2
            continue
        out.append(ch)
        i += 1
    return "".join(out)


def _partition_of(sysfs_root: str, major: int, minor: int) -> str | None:
    """The whole disk's name when major:minor is a partition (sysfs has a `partition` file)."""
    node = Path(sysfs_root, "dev", "block", f"{major}:{minor}")
    if not (node / "partition").exists():
        return None
    parent = Path(os.path.realpath(node)).parent
    return parent.name if (parent / "dev").exists() else "?"


@dataclass(frozen=True)
class Resolved:
    devices: tuple[BlockDevice, ...]
    problems: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()


def resolve_devices(
    patterns: Sequence[str], *, key_path: str = "Devices", sysfs_root: str = "/sys"
) -> Resolved:
    """Globs -> whole-disk block devices (deduplicated, in order found)."""
    devices: dict[tuple[int, int], BlockDevice] = {}
    problems: list[str] = []
    warnings: list[str] = []
    for j, pattern in enumerate(patterns):
        where = f"{key_path}.{j}"
        literal = not glob.has_magic(pattern) and "\\" not in pattern
        matches = [pattern] if literal else sorted(glob.glob(_python_glob(pattern)))
        if literal and not os.path.lexists(pattern):
            matches = []
        if not matches:
            warnings.append(f'{where}: "{pattern}" matches no device on this machine')
            continue
        skipped = []
        for match in matches:
            real = os.path.realpath(match)
            shown = f'"{match}"' + (f" (-> {real})" if real != match else "")
            try:
                st = os.stat(real)
            except OSError as exc:
                warnings.append(f"{where}: {shown}: {exc.strerror}")
                continue
            reason = None
            if stat.S_ISCHR(st.st_mode):
                reason = "is a character device, not a block device"
            elif not stat.S_ISBLK(st.st_mode):
                reason = "is not a device"
            else:
                major, minor = os.major(st.st_rdev), os.minor(st.st_rdev)
                disk = _partition_of(sysfs_root, major, minor)
                if disk is not None:
                    reason = (
                        f"is a partition ({major}:{minor}); weights and throttling apply to "
                        f"whole disks: use /dev/{disk}"
                    )
                else:
                    devices.setdefault((major, minor), BlockDevice(major, minor, real))
            if reason and literal:
                problems.append(f"{where}: {shown} {reason}")
            elif reason:
                skipped.append(match)
        if skipped:
            listing = ", ".join(skipped[:5]) + (
                f" and {len(skipped) - 5} more" if len(skipped) > 5 else ""
            )
            warnings.append(
                f'{where}: "{pattern}" also matches {listing}: not whole-disk block devices, '
                "skipped"
            )
    return Resolved(tuple(devices.values()), tuple(problems), tuple(warnings))


Resolver = Callable[[Sequence[str], str], Resolved]


def compile_classes(
    config: BlockIOConfig | None,
    *,
    sysfs_root: str = "/sys",
    resolver: Resolver | None = None,
) -> tuple[dict[str, BlockIOClass], list[str]]:
    """Configuration -> classes with resolved devices, and warnings. Raises ConfigError
    (key paths) for a named device that is not a whole-disk block device, or bad syntax."""

    if config is None:
        return {}, []
    problems = check_blockio(config)
    if problems:
        raise ConfigError(problems)

    def default_resolver(patterns: Sequence[str], key_path: str) -> Resolved:
        return resolve_devices(patterns, key_path=key_path, sysfs_root=sysfs_root)

    resolve = resolver or default_resolver
    warnings: list[str] = []
    classes: dict[str, BlockIOClass] = {}
    for name, entries in config.Classes.items():
        weight: int | None = None
        settings: dict[tuple[int, int], DeviceSettings] = {}
        for index, entry in enumerate(entries or ()):
            base = f"blockio.Classes.{name}.{index}"
            entry_weight = quantity_value(entry.Weight) if entry.Weight is not None else None
            if entry.Devices is None:
                weight = entry_weight if entry_weight is not None else weight
                continue
            found = resolve(entry.Devices, f"{base}.Devices")
            problems.extend(found.problems)
            warnings.extend(found.warnings)
            values: dict[str, Any] = {"weight": entry_weight}
            for key, attr, _, _ in THROTTLES:
                raw = getattr(entry, key)
                values[attr] = quantity_value(raw) if raw is not None else None
            given = {k: v for k, v in values.items() if v is not None}
            for device in found.devices:
                k = (device.major, device.minor)
                # Later entries win for the same device, one setting at a time.
                settings[k] = replace(settings.get(k, DeviceSettings(device)), **given)
        classes[name] = BlockIOClass(name, weight, tuple(settings[k] for k in sorted(settings)))
    if problems:
        raise ConfigError(problems)
    return classes, warnings


# -- a container's cgroup -------------------------------------------------------------------


@dataclass(frozen=True)
class CgroupIO:
    """What a container's cgroup folder offers, and which devices have entries now."""

    version: Literal[1, 2]
    files: frozenset[str]
    current: Mapping[str, frozenset[tuple[int, int]]] = field(default_factory=dict)

    @property
    def weight_file(self) -> str:
        if self.version == 1:
            return "blkio.weight" if "blkio.weight" in self.files else "blkio.bfq.weight"
        return "io.bfq.weight" if "io.bfq.weight" in self.files else "io.weight"

    @property
    def weight_device_file(self) -> str:
        if self.version == 1:
            if "blkio.weight_device" in self.files:
                return "blkio.weight_device"
            return "blkio.bfq.weight_device"
        return self.weight_file  # v2 takes "MAJ:MIN N" in the same file

    @property
    def bfq(self) -> bool:
        """Weights in bfq's files: v1 scale, and "MAJ:MIN default" resets a device."""
        return "bfq" in self.weight_file


_DEVICE_LINE = re.compile(r"(\d+):(\d+)\s")


def _devices_in(text: str) -> frozenset[tuple[int, int]]:
    found = set()
    for line in text.splitlines():
        match = _DEVICE_LINE.match(line.strip() + " ")
        if match:
            found.add((int(match.group(1)), int(match.group(2))))
    return frozenset(found)


def read_cgroup_io(folder: str | os.PathLike[str]) -> CgroupIO:
    """Detects v1 (blkio.*) or v2 (io.*) by the files present; BlockIOUnavailable otherwise."""
    base = Path(folder)
    try:
        names = frozenset(os.listdir(base))
    except OSError as exc:
        raise BlockIOUnavailable(f"cannot read cgroup folder {base}: {exc.strerror}") from None
    if "cgroup.controllers" in names:
        version: Literal[1, 2] = 2
        if not names & {"io.max", "io.weight", "io.bfq.weight"}:
            raise BlockIOUnavailable(
                f"the io controller is not enabled for {base} (see cgroup.subtree_control of "
                "its parent)"
            )
    elif any(n.startswith("blkio.") for n in names):
        version = 1
    else:
        raise BlockIOUnavailable(f"{base} is not a blkio (v1) or io (v2) cgroup folder")
    cgroup = CgroupIO(version, names)
    watched = {cgroup.weight_device_file}
    if version == 1:
        watched.update(t[2] for t in THROTTLES)
    else:
        watched.add("io.max")
    current = {}
    for name in watched & names:
        try:
            current[name] = _devices_in((base / name).read_text())
        except OSError:
            current[name] = frozenset()
    return CgroupIO(version, names, current)


@dataclass(frozen=True)
class Write:
    file: str
    line: str
    weight: bool = False  # a weight: failing is a warning, not an error


def plan_writes(cls: BlockIOClass, cgroup: CgroupIO) -> list[Write]:
    """The lines that make the cgroup match the class: its settings, and resets for devices
    that have an entry now but none in the class (a reload that dropped them). Pure."""
    writes: list[Write] = []
    weighted = {(d.device.major, d.device.minor) for d in cls.devices if d.weight is not None}
    throttled = {(d.device.major, d.device.minor) for d in cls.devices if d.throttled}
    weight_file, device_file = cgroup.weight_file, cgroup.weight_device_file

    def scaled(weight: int) -> int:
        return weight if cgroup.bfq or cgroup.version == 1 else v2_weight(weight)

    if cls.weight is not None:
        line = str(cls.weight) if cgroup.version == 1 else f"default {scaled(cls.weight)}"
        writes.append(Write(weight_file, line, weight=True))
    for d in cls.devices:
        if d.weight is not None:
            writes.append(Write(device_file, f"{d.device.key} {scaled(d.weight)}", weight=True))
    reset = "0" if cgroup.version == 1 and not cgroup.bfq else "default"
    for major, minor in sorted(cgroup.current.get(device_file, frozenset()) - weighted):
        writes.append(Write(device_file, f"{major}:{minor} {reset}", weight=True))
    if cgroup.version == 1:
        for _, attr, file, _ in THROTTLES:
            wanted = set()
            for d in cls.devices:
                value = getattr(d, attr)
                if value is not None:
                    wanted.add((d.device.major, d.device.minor))
                    writes.append(Write(file, f"{d.device.key} {value}"))  # 0 removes
            for major, minor in sorted(cgroup.current.get(file, frozenset()) - wanted):
                writes.append(Write(file, f"{major}:{minor} 0"))
        return writes
    for d in cls.devices:
        if d.throttled:
            limits = " ".join(f"{key}={getattr(d, attr) or 'max'}" for _, attr, _, key in THROTTLES)
            writes.append(Write("io.max", f"{d.device.key} {limits}"))
    for major, minor in sorted(cgroup.current.get("io.max", frozenset()) - throttled):
        writes.append(Write("io.max", f"{major}:{minor} rbps=max wbps=max riops=max wiops=max"))
    return writes


def _scheduler(sysfs_root: str, line: str) -> str | None:
    match = _DEVICE_LINE.match(line + " ")
    if not match:
        return None
    path = Path(sysfs_root, "dev", "block", f"{match.group(1)}:{match.group(2)}", "queue")
    try:
        text = read_value_file(path / "scheduler")
    except OSError:
        return None
    found = re.search(r"\[([^\]]+)\]", text)
    return found.group(1) if found else text.strip() or None


def apply_writes(
    folder: str | os.PathLike[str], writes: Iterable[Write], *, sysfs_root: str = "/sys"
) -> list[str]:
    """Writes each line with its own write(2). Returns warnings for weights the kernel would
    not take; raises ApplyError (after trying every line) for anything else it refused."""
    warnings: list[str] = []
    errors: list[str] = []
    base = Path(folder)
    for w in writes:
        path = base / w.file
        log.debug("blockio: %s <- %r", path, w.line)
        try:
            # O_APPEND: harmless on cgroupfs, and a stand-in folder keeps a log of writes.
            fd = os.open(path, os.O_WRONLY | os.O_APPEND)
            try:
                os.write(fd, (w.line + "\n").encode())
            finally:
                os.close(fd)
        except OSError as exc:
            if w.weight and exc.errno in _WEIGHT_ERRNOS:
                why = exc.strerror or str(exc)
                scheduler = _scheduler(sysfs_root, w.line)
                if scheduler is not None and scheduler != "bfq":
                    why += f": the device uses the {scheduler} I/O scheduler; weights need bfq"
                elif exc.errno == errno.ENOENT:
                    why = f"weights are not supported here (no {w.file})"
                warnings.append(f"blockio: weight not applied: {path} <- {w.line!r}: {why}")
                continue
            errors.append(f"{path} <- {w.line!r}: {exc.strerror or exc}")
    if errors:
        raise ApplyError("blockio: the kernel refused " + "; ".join(errors))
    return warnings


def blockio_cgroup_dir(
    cgroup_parent: str, container_id: str, cgroupfs_root: str = "/sys/fs/cgroup"
) -> Path:
    """The container's block-I/O cgroup folder: `<root>/blkio/<parent>/<id>` with cgroup v1
    (or hybrid), `<root>/<parent>/<id>` with the unified v2 layout."""
    controller = "blkio" if cgroup_version(cgroupfs_root) == 1 else None
    return Path(cgroup_path(controller, cgroup_parent, container_id, cgroupfs_root))


# -- the controller -------------------------------------------------------------------------


@dataclass(frozen=True)
class BlockIOResult:
    applied: bool  # False: skipped quietly (a QoS-class default not configured, no blkio)
    folder: Path | None = None
    warnings: tuple[str, ...] = ()


class BlockIOController:
    """Keeps the compiled classes; applies one to a container's cgroup on request."""

    def __init__(
        self, cgroupfs_root: str | os.PathLike[str] = "/sys/fs/cgroup", *, sysfs_root: str = "/sys"
    ) -> None:
        self.cgroupfs_root = os.fspath(cgroupfs_root)
        self.sysfs_root = sysfs_root
        self._classes: dict[str, BlockIOClass] = {}

    @property
    def classes(self) -> Mapping[str, BlockIOClass]:
        return dict(self._classes)

    def compile(self, config: BlockIOConfig | None) -> tuple[dict[str, BlockIOClass], list[str]]:
        """What `configure` would keep, without keeping it (to validate a reload first)."""
        return compile_classes(config, sysfs_root=self.sysfs_root)

    def configure(self, config: BlockIOConfig | None) -> list[str]:
        """Resolves devices and keeps the classes; returns warnings; ConfigError when refused.
        Containers already running are not touched: call `apply` again for each of them."""
        classes, warnings = self.compile(config)
        self._classes = classes
        return warnings

    def cgroup_dir(self, cgroup_parent: str, container_id: str) -> Path:
        return blockio_cgroup_dir(cgroup_parent, container_id, self.cgroupfs_root)

    def apply(
        self, name: str, cgroup_parent: str, container_id: str, *, explicit: bool = True
    ) -> BlockIOResult:
        """Puts the container into class `name`. An explicit request for a malformed, unknown
        or (on this node) unusable class raises InvalidClassName, UnknownClass or
        BlockIOUnavailable; a QoS-class default (`explicit=False`) is then skipped quietly."""
        return self.apply_dir(name, self.cgroup_dir(cgroup_parent, container_id), explicit=explicit)

    def check(self, name: str, *, explicit: bool = True) -> bool:
        """For CreateContainer, before the cgroup exists: InvalidClassName / UnknownClass for an
        explicit request that `apply` would refuse; False when a default would be skipped."""
        if not _CLASS_NAME.fullmatch(name):
            raise InvalidClassName("blockio", name)
        if name not in self._classes:
            if explicit:
                raise UnknownClass("blockio", name, self._classes)
            return False
        return True

    def apply_dir(
        self, name: str, folder: str | os.PathLike[str], *, explicit: bool = True
    ) -> BlockIOResult:
        if not self.check(name, explicit=explicit):
            return BlockIOResult(False)
        cls = self._classes[name]
        try:
            cgroup = read_cgroup_io(folder)
        except BlockIOUnavailable as exc:
            if explicit:
                raise BlockIOUnavailable(
                    f'block-I/O class "{name}" cannot be applied: {exc}'
                ) from None
            return BlockIOResult(False)
        warnings = apply_writes(folder, plan_writes(cls, cgroup), sysfs_root=self.sysfs_root)
        return BlockIOResult(True, Path(folder), tuple(warnings))
