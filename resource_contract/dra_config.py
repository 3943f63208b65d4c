"""The `dra:` section of the configuration: whether the enforcer serves the DRA kubelet plugin
for `cpu.resource-enforcer.dev`, and how it publishes CPUs as devices (CONTRACT.md)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict

DRA_DRIVER = "cpu.resource-enforcer.dev"


class DRAConfig(BaseModel):
    """`dra.enabled`: serve the plugin and publish ResourceSlices; `dra.mode`: `individual`
    (one device per allocatable CPU) or `grouped` (one device per NUMA node, its CPUs a
    consumable capacity)."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    enabled: bool = False
    mode: Literal["individual", "grouped"] = "individual"
