"""Block-I/O classes: I/O scheduler weights and throttling per class, per device.

The configuration is goresctrl's (`blockio: {Classes: {NAME: [entries]}}`). Pure core:
`check_blockio` (syntax and ranges, any machine, run by `parse_config`) and `compile_with`
(configuration + devices -> `BlockIOClass`, settings per major:minor; for the same device later
entries win, setting by setting) in `blockio.settings`; `plan_writes` (which file of a
container's cgroup gets which line) in `blockio.plan`. Edges: `resolve_devices` and
`compile_classes` (they read /dev and sysfs) in `blockio.devices`; `read_cgroup_io` and
`apply_writes` in `blockio.cgroup_files`; `BlockIOCgroups` (the state kept between configuration
and containers) in `blockio.cgroups`.
"""

from enforcer.controllers.blockio.cgroup_files import (
    apply_writes,
    blockio_cgroup_dir,
    read_cgroup_io,
)
from enforcer.controllers.blockio.cgroups import BlockIOCgroups, BlockIOResult
from enforcer.controllers.blockio.devices import compile_classes, resolve_devices
from enforcer.controllers.blockio.plan import CgroupIO, Write, plan_writes
from enforcer.controllers.blockio.settings import (
    THROTTLES,
    WEIGHT_MAX,
    WEIGHT_MIN,
    BlockDevice,
    BlockIOClass,
    DeviceSettings,
    Resolved,
    Resolver,
    check_blockio,
    compile_with,
    quantity_value,
    v2_weight,
)

__all__ = [
    "THROTTLES",
    "WEIGHT_MAX",
    "WEIGHT_MIN",
    "BlockDevice",
    "BlockIOCgroups",
    "BlockIOClass",
    "BlockIOResult",
    "CgroupIO",
    "DeviceSettings",
    "Resolved",
    "Resolver",
    "Write",
    "apply_writes",
    "blockio_cgroup_dir",
    "check_blockio",
    "compile_classes",
    "compile_with",
    "plan_writes",
    "quantity_value",
    "read_cgroup_io",
    "resolve_devices",
    "v2_weight",
]
