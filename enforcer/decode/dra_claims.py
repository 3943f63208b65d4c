"""How a container is recognised as one of a prepared DRA claim of `cpu.resource-enforcer.dev`
(pure: the names only, no I/O).

The driver writes one CDI device per prepared claim, `cpu.resource-enforcer.dev/claim=<uid>`,
whose only edit is the environment variable `KRE_DRA_CLAIM_<uid, - as _>=<uid>`. kubelet hands
the CDI device id to the runtime: the CRI relay reads it in CreateContainerRequest's
`config.CDI_devices`; containerd injects the CDI edits into the container before its NRI
CreateContainer, so the NRI plugin reads the environment variable.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

CDI_VENDOR = "cpu.resource-enforcer.dev"
CDI_CLASS = "claim"
CDI_KIND = f"{CDI_VENDOR}/{CDI_CLASS}"
ENV_PREFIX = "KRE_DRA_CLAIM_"
# The `source` of a prepared claim's own entry in the registry (enforcer.engine.claimed): a
# held decision without a container, released by unpreparing the claim.
CLAIM_SOURCE = "dra-claim"
MAX_CLAIMS = 16  # claims of ours one container can name; more are ignored (bounded)
# A Kubernetes uid: what CDI device names and environment names can both carry.
_UID = re.compile(r"^[0-9A-Za-z][0-9A-Za-z-]{0,63}$")


def cdi_device_id(uid: str) -> str:
    return f"{CDI_KIND}={uid}"


def env_name(uid: str) -> str:
    return ENV_PREFIX + uid.replace("-", "_")


def claims_from_cdi(names: Iterable[str]) -> tuple[str, ...]:
    """The claim uids among a container's CDI device ids (other vendors' are ignored)."""
    prefix = f"{CDI_KIND}="
    found = [n[len(prefix) :] for n in names if n.startswith(prefix)]
    return _bounded(found)


def claims_from_env(env: Iterable[str]) -> tuple[str, ...]:
    """The claim uids a container's environment (NAME=value strings) carries."""
    found = []
    for item in env:
        if item.startswith(ENV_PREFIX):
            name, _, value = item.partition("=")
            if name == env_name(value):
                found.append(value)
    return _bounded(found)


def _bounded(uids: list[str]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(u for u in uids if _UID.fullmatch(u)))[:MAX_CLAIMS]
