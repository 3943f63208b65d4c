"""RDT classes: cache and memory-bandwidth partitioning through resctrl.

Pure core: `parse_rdt` (syntax, any machine), `read_resctrl_info` (the hardware, an edge that
only reads) and `plan_rdt`/`compute_schemata` (configuration + hardware -> schemata per class).
Edge: `ResctrlGroups` (groups, schemata, tasks).
"""

from enforcer.controllers.errors import (
    ApplyError,
    ClassError,
    InvalidClassName,
    RdtUnavailable,
    UnknownClass,
)
from enforcer.controllers.rdt.allocation import check_rdt, parse_rdt
from enforcer.controllers.rdt.hardware import CatInfo, MbInfo, ResctrlInfo, read_resctrl_info
from enforcer.controllers.rdt.resctrl_groups import (
    KernelResctrlFs,
    ResctrlFs,
    ResctrlGroups,
    check_class_name,
)
from enforcer.controllers.rdt.schemata import RdtPlan, compute_schemata, plan_rdt
from enforcer.controllers.rdt.values import ROOT_CLASS, ParsedRdt

__all__ = [
    "ROOT_CLASS",
    "ApplyError",
    "CatInfo",
    "ClassError",
    "InvalidClassName",
    "KernelResctrlFs",
    "MbInfo",
    "ParsedRdt",
    "RdtPlan",
    "RdtUnavailable",
    "ResctrlFs",
    "ResctrlGroups",
    "ResctrlInfo",
    "UnknownClass",
    "check_class_name",
    "check_rdt",
    "compute_schemata",
    "parse_rdt",
    "plan_rdt",
    "read_resctrl_info",
]
