"""From a runtime's container creation to what the container asked for (pure: no I/O)."""

from enforcer.decode.class_settings import ClassSettings
from enforcer.decode.kubelet import KubeletResources
from enforcer.decode.machine import Machine
from enforcer.decode.request import (
    ContainerCreate,
    ContainerRequest,
    DecodeError,
    Preferences,
    decode_container,
    estimate_from_cri,
)

__all__ = [
    "ClassSettings",
    "ContainerCreate",
    "ContainerRequest",
    "DecodeError",
    "KubeletResources",
    "Machine",
    "Preferences",
    "decode_container",
    "estimate_from_cri",
]
