"""Block-I/O classes as values: the `blockio` section's syntax on any machine
(`check_blockio`) and its classes compiled with the devices a resolver finds (`compile_with`).
Pure: the devices are read from /dev and sysfs by `blockio.devices`."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from resource_contract.class_config import BlockIOConfig
from resource_contract.config import ConfigError
from resource_contract.quantities import parse_quantity

WEIGHT_MIN, WEIGHT_MAX = 10, 1000
# Config key -> DeviceSettings attribute, v1 file, v2 io.max key.
THROTTLES: tuple[tuple[str, str, str, str], ...] = (
    ("ThrottleReadBps", "read_bps", "blkio.throttle.read_bps_device", "rbps"),
    ("ThrottleWriteBps", "write_bps", "blkio.throttle.write_bps_device", "wbps"),
    ("ThrottleReadIOPS", "read_iops", "blkio.throttle.read_iops_device", "riops"),
    ("ThrottleWriteIOPS", "write_iops", "blkio.throttle.write_iops_device", "wiops"),
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


@dataclass(frozen=True)
class Resolved:
    devices: tuple[BlockDevice, ...]
    problems: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()


Resolver = Callable[[Sequence[str], str], Resolved]


def compile_with(
    config: BlockIOConfig | None, resolve: Resolver
) -> tuple[dict[str, BlockIOClass], list[str]]:
    """Configuration -> classes with the devices `resolve` finds, and warnings. Raises
    ConfigError (key paths) for a named device that is not a whole-disk block device, or bad
    syntax."""

    if config is None:
        return {}, []
    problems = check_blockio(config)
    if problems:
        raise ConfigError(problems)
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
