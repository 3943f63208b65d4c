"""What the configuration lets containers ask for: the classes and preferences a request is
checked against while it is decoded (pure data)."""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, field

from resource_contract.balloons import BalloonAccess
from resource_contract.classes import ClassAccess
from resource_contract.cpu_classes import CpuClassAccess
from resource_contract.preferences import PreferenceAccess
from resource_contract.task_classes import TaskClassSettings


@dataclass(frozen=True)
class ClassSettings:
    """What the configuration says about class and preference requests; `None` configured
    classes means no check, and the default access rules allow everything."""

    rdt: Collection[str] | None = None
    blockio: Collection[str] | None = None
    access: ClassAccess = field(default_factory=ClassAccess)
    preferences: PreferenceAccess = field(default_factory=PreferenceAccess)
    # Balloon types a pod may ask for; None: not the balloons policy, any well-formed name.
    balloon_types: Collection[str] | None = None
    balloon_access: BalloonAccess = field(default_factory=BalloonAccess)
    # CPU classes (`cpuClasses`) a pod may ask for; None: unknown, any well-formed name.
    cpu_classes: Collection[str] | None = None
    cpu_class_access: CpuClassAccess = field(default_factory=CpuClassAccess)
    tasks: TaskClassSettings = field(default_factory=TaskClassSettings)  # scheduling, memory
