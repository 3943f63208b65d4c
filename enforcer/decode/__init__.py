"""From a CRI request to what the container asked for (pure: no I/O, no runtime calls)."""

from enforcer.decode.request import (
    ClassSettings,
    ContainerRequest,
    DecodeError,
    Preferences,
    decode_create_container,
    estimate_from_cri,
)

__all__ = [
    "ClassSettings",
    "ContainerRequest",
    "DecodeError",
    "Preferences",
    "decode_create_container",
    "estimate_from_cri",
]
