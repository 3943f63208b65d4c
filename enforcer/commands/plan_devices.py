"""`resource-enforcer plan --devices FILE`: the devices kubelet would report for containers
(as its pod-resources API does on a node), so that `plan` shows policy.preferCloseToDevices.

The file maps `namespace/pod/container` to the devices and their NUMA nodes:

    prod/nic-pod/app:
      devices: ["example.com/fake-nic=nic-0"]   # names, as the enforcer logs them
      numaNodes: [1]
"""

from __future__ import annotations

from typing import Any

import yaml

from enforcer.commands.manifests import PlanInputError
from enforcer.engine.model import DeviceFacts

MAX_ENTRIES = 10_000
MAX_DEVICES = 64


def parse_devices(data: Any, source: str) -> dict[str, DeviceFacts]:
    """`namespace/pod/container` -> its devices; PlanInputError naming the offending key."""
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise PlanInputError(f"{source}: must map namespace/pod/container to devices")
    if len(data) > MAX_ENTRIES:
        raise PlanInputError(f"{source}: more than {MAX_ENTRIES} containers")
    out: dict[str, DeviceFacts] = {}
    for key, value in data.items():
        where = f"{source}: {key}"
        if not isinstance(key, str) or key.count("/") != 2 or "" in key.split("/"):
            raise PlanInputError(f"{where}: the key must be namespace/pod/container")
        if not isinstance(value, dict) or set(value) - {"devices", "numaNodes"}:
            raise PlanInputError(f"{where}: must have only the keys devices and numaNodes")
        devices, nodes = value.get("devices", []), value.get("numaNodes", [])
        if (
            not isinstance(devices, list)
            or not devices
            or len(devices) > MAX_DEVICES
            or not all(isinstance(d, str) and d for d in devices)
        ):
            raise PlanInputError(
                f"{where}.devices: must be a list of 1 to {MAX_DEVICES} device names"
            )
        if not isinstance(nodes, list) or not all(
            isinstance(n, int) and not isinstance(n, bool) and 0 <= n < 1 << 16 for n in nodes
        ):
            raise PlanInputError(f"{where}.numaNodes: must be a list of NUMA node numbers")
        out[key] = DeviceFacts(tuple(devices), tuple(sorted(set(nodes))))
    return out


def load_devices(path: str) -> dict[str, DeviceFacts]:
    try:
        with open(path, encoding="utf-8") as f:
            data = yaml.safe_load(f)
    except OSError as exc:
        raise PlanInputError(f"{path}: cannot read: {exc.strerror}") from None
    except yaml.YAMLError as exc:
        raise PlanInputError(f"{path}: not YAML: {exc}".replace("\n", " ")) from None
    return parse_devices(data, path)
