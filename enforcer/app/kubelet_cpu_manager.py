"""kubelet's own CPU manager on this node: the enforcer refuses to start beside its `static` policy.

kubelet keeps its CPU manager's checkpoint in `<kubelet-dir>/cpu_manager_state` (JSON:
`{"policyName": "none"|"static", "defaultCpuSet": ..., "entries": ..., "checksum": ...}`),
written at every kubelet start. Under `static`, kubelet pins Guaranteed containers itself and
re-applies its own cpusets in its reconcile loop (every 10 s), so two pinners would fight over
every container's cpuset and no CPU would ever be exclusive to one container. Treating kubelet's
assignments as held would not help either: kubelet hands out CPUs without knowing ours. So the
enforcer does not start and says what to change (docs/install.md, Step 4).

No file: kubelet has not run with this root yet (or the folder is not mounted): the enforcer
starts, with a warning. An unreadable or malformed file is kubelet's business: a warning too.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

from enforcer.app.errors import StartError

log = logging.getLogger("enforcer")

STATE_FILE = "cpu_manager_state"
MAX_BYTES = 1 << 20  # kubelet's checkpoint of a few hundred containers is a few kiB


def policy_of(text: str) -> str | None:
    """The `policyName` of a cpu_manager_state checkpoint; None when it names none."""
    try:
        doc = json.loads(text)
    except ValueError:
        return None
    name = doc.get("policyName") if isinstance(doc, dict) else None
    return name if isinstance(name, str) else None


def check_kubelet_cpu_manager(kubelet_dir: str) -> None:
    """Raises StartError when kubelet's CPU manager runs a policy other than `none`."""
    path = Path(kubelet_dir) / STATE_FILE
    try:
        with path.open("rb") as f:
            raw = f.read(MAX_BYTES + 1)
    except FileNotFoundError:
        log.warning(
            "%s not found: cannot tell kubelet's CPU manager policy (it must be none; "
            "is --kubelet-dir kubelet's --root-dir?)",
            path,
        )
        return
    except OSError as exc:
        log.warning("cannot read %s (%s): cannot tell kubelet's CPU manager policy", path, exc)
        return
    policy = None if len(raw) > MAX_BYTES else policy_of(raw.decode("utf-8", "replace"))
    if policy is None:
        log.warning("%s names no policyName: cannot tell kubelet's CPU manager policy", path)
        return
    if policy != "none":
        raise StartError(
            f"kubelet's CPU manager policy is {policy!r} ({path}), and it pins containers "
            "itself: the enforcer does not run beside it. Set cpuManagerPolicy: none in "
            "kubelet's configuration, drain the node, remove that file and restart kubelet "
            "(docs/install.md, Step 4)"
        )
    log.info("kubelet's CPU manager policy is none (%s)", path)
