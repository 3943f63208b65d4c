"""runc as CRI-O's private bed runs it: the OCI spec's oomScoreAdj raised to the caller's own.

containerd's CRI plugin has ``restrict_oom_score_adj`` (FACTS.md); CRI-O has no such setting,
and runc fails here ("failed to update /proc/self/oom_score_adj: Permission denied") for any
score below the caller's own, which this machine does not let a process lower: kubelet's -997
for a Guaranteed container, CRI-O's own -998 for a sandbox's pause container. PrivateCrio gives
CRI-O this file as its runc (``runtime_path``): on ``create`` and ``run`` it raises the bundle's
``process.oomScoreAdj`` to its own score, as containerd does, then runs the real runc with the
same arguments. Run as ``python3 crio_runc.py REAL_RUNC ARGS...``, through a two-line script.

It also does what containerd's ``tolerate_missing_hugetlb_controller`` does: kubelet asks for a
hugetlb limit per page size, and runc fails ("cannot set hugetlb limit: container could not
join or create cgroup") where the host mounts no hugetlb controller, as this one does not; the
limits are dropped from the spec then.
"""

from __future__ import annotations

import json
import os
import sys


def bundle_of(args: list[str]) -> str | None:
    """The ``--bundle``/``-b`` folder of a runc create or run command line, else None."""
    if not {"create", "run"} & set(args):
        return None
    for i, arg in enumerate(args):
        if arg in ("--bundle", "-b") and i + 1 < len(args):
            return args[i + 1]
        if arg.startswith("--bundle="):
            return arg.split("=", 1)[1]
    return os.getcwd()


def hugetlb_controller(cgroupfs: str = "/sys/fs/cgroup") -> bool:
    """Whether the host has a hugetlb controller (a v1 hierarchy, or v2's controllers list)."""
    if os.path.isdir(os.path.join(cgroupfs, "hugetlb")):
        return True
    try:
        with open(os.path.join(cgroupfs, "cgroup.controllers")) as f:
            return "hugetlb" in f.read().split()
    except OSError:
        return False


def restrict(config_path: str, floor: int, hugetlb: bool = True) -> bool:
    """Raise the spec's process.oomScoreAdj to ``floor``, and without a ``hugetlb``
    controller drop its hugetlb limits; True when the file was changed."""
    with open(config_path) as f:
        spec = json.load(f)
    changed = False
    process = spec.get("process") or {}
    score = process.get("oomScoreAdj")
    if isinstance(score, int) and score < floor:
        process["oomScoreAdj"] = floor
        changed = True
    resources = (spec.get("linux") or {}).get("resources") or {}
    if not hugetlb and resources.get("hugepageLimits"):
        del resources["hugepageLimits"]
        changed = True
    if changed:
        with open(config_path, "w") as f:
            json.dump(spec, f)
    return changed


def main(argv: list[str]) -> None:
    runc, args = argv[1], argv[2:]
    bundle = bundle_of(args)
    if bundle is not None and os.path.exists(os.path.join(bundle, "config.json")):
        with open("/proc/self/oom_score_adj") as f:
            floor = int(f.read())
        restrict(os.path.join(bundle, "config.json"), floor, hugetlb_controller())
    os.execv(runc, [runc, *args])


if __name__ == "__main__":
    main(sys.argv)
