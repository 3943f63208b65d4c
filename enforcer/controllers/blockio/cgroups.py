"""The block-I/O state the enforcer keeps between configuration and containers: the compiled
classes, one applied to a container's cgroup on request."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from enforcer.controllers.blockio.cgroup_files import (
    apply_writes,
    blockio_cgroup_dir,
    read_cgroup_io,
)
from enforcer.controllers.blockio.devices import compile_classes
from enforcer.controllers.blockio.plan import plan_writes
from enforcer.controllers.blockio.settings import BlockIOClass
from enforcer.controllers.errors import BlockIOUnavailable, InvalidClassName, UnknownClass
from resource_contract.class_config import BlockIOConfig
from resource_contract.classes import CLASS_NAME_PATTERN

_CLASS_NAME = re.compile(CLASS_NAME_PATTERN)


@dataclass(frozen=True)
class BlockIOResult:
    applied: bool  # False: skipped quietly (a QoS-class default not configured, no blkio)
    folder: Path | None = None
    warnings: tuple[str, ...] = ()


class BlockIOCgroups:
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
