"""Every controller the enforcer has, registered in one place, in the order the engine calls
them: cpuset, RDT, block I/O, CPU classes, scheduling classes, memory classes, IRQ isolation."""

from __future__ import annotations

from collections.abc import Callable

from enforcer.controllers.base import Roots
from enforcer.controllers.blockio.lifecycle import BlockIOClasses
from enforcer.controllers.cpu_classes import CpuClasses
from enforcer.controllers.cpuset import CpusetController, CpusetReader
from enforcer.controllers.group import Controllers
from enforcer.controllers.irq_isolation import IrqIsolation
from enforcer.controllers.memory_classes import MemoryClasses
from enforcer.controllers.rdt.lifecycle import RdtClasses
from enforcer.controllers.scheduling_classes import SchedulingClasses
from enforcer.topology import Topology
from resource_contract.config import ConfigCheck

CONTROLLER_TYPES = (
    CpusetController,
    RdtClasses,
    BlockIOClasses,
    CpuClasses,
    SchedulingClasses,
    MemoryClasses,
    IrqIsolation,
)

# Each controller's syntax check of its own section, in the order their problems are reported
# (run by `enforcer.configuration.parse_config`).
CONFIG_CHECKS: tuple[ConfigCheck, ...] = tuple(t.syntax for t in CONTROLLER_TYPES)


def node_controllers(
    roots: Roots,
    topology: Topology | None = None,
    cpuset_reader: Callable[[CpusetReader], CpusetReader] | None = None,
) -> Controllers:
    """The controllers of a node whose kernel interfaces are at `roots`. `topology`: the
    machine already read (else the cpuset controller reads `roots.sysfs` when it checks);
    `cpuset_reader`: the transport's reader of cpusets over the kernel's."""
    return Controllers(
        [
            CpusetController.for_node(roots, topology, cpuset_reader),
            RdtClasses.for_node(roots),
            BlockIOClasses.for_node(roots),
            CpuClasses.for_node(roots, topology),
            SchedulingClasses.for_node(roots),
            MemoryClasses.for_node(roots),
            IrqIsolation.for_node(roots, topology),
        ]
    )
