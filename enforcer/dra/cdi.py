"""The CDI specs of prepared claims: one file per claim in the CDI spec folder (default
/var/run/cdi, which containerd and CRI-O read), whose one device marks the container as the
claim's (enforcer.decode.dra_claims says how each transport reads the mark)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from enforcer.decode.dra_claims import CDI_CLASS, CDI_KIND, CDI_VENDOR, env_name
from resource_files.safe_files import write_file

CDI_VERSION = "0.6.0"
DEFAULT_CDI_DIR = "/var/run/cdi"


def spec_path(cdi_dir: str | os.PathLike[str], uid: str) -> Path:
    return Path(cdi_dir) / f"{CDI_VENDOR}-{CDI_CLASS}_{uid}.json"


def spec_for(uid: str) -> dict[str, Any]:
    """The CDI spec of one claim: device `<uid>` of kind cpu.resource-enforcer.dev/claim,
    setting KRE_DRA_CLAIM_<uid>=<uid> in the container."""
    return {
        "cdiVersion": CDI_VERSION,
        "kind": CDI_KIND,
        "devices": [{"name": uid, "containerEdits": {"env": [f"{env_name(uid)}={uid}"]}}],
    }


def write_spec(cdi_dir: str | os.PathLike[str], uid: str) -> Path:
    """Writes (atomically, readable by the runtime) the claim's spec; OSError when it cannot."""
    Path(cdi_dir).mkdir(parents=True, exist_ok=True)
    path = spec_path(cdi_dir, uid)
    write_file(path, json.dumps(spec_for(uid), sort_keys=True).encode(), mode=0o644)
    return path


def remove_spec(cdi_dir: str | os.PathLike[str], uid: str) -> None:
    """Removes the claim's spec; nothing when it is not there."""
    spec_path(cdi_dir, uid).unlink(missing_ok=True)
