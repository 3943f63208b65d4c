"""A container's block-I/O cgroup as values, and the lines that put it into a class
(`plan_writes`): which file gets which line, v1 or v2 as found, and resets for the devices a
reload dropped. Pure: `blockio.cgroup_files` reads the folder and writes the lines."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

from enforcer.controllers.blockio.settings import THROTTLES, BlockIOClass, v2_weight


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


DEVICE_LINE = re.compile(r"(\d+):(\d+)\s")


def devices_in(text: str) -> frozenset[tuple[int, int]]:
    """The MAJ:MIN of every line of a cgroup file that names a device."""
    found = set()
    for line in text.splitlines():
        match = DEVICE_LINE.match(line.strip() + " ")
        if match:
            found.add((int(match.group(1)), int(match.group(2))))
    return frozenset(found)


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
