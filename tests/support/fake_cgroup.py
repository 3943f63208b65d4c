"""Stand-in cgroup folders, laid out as the kernel does, for block-I/O tests and demos.

`make_v2(root, parent, container_id)` builds a unified (v2) hierarchy down to a container's
folder: the root with `cgroup.controllers` and `cgroup.subtree_control` (the `io` controller
enabled unless `io=False`), every level with the core `cgroup.*` files, and in the container
folder `io.max` (empty: no limits), `io.weight` (`default 100`), `io.stat`, `io.pressure` and,
with `bfq=True` (bfq loaded), `io.bfq.weight`. The kernel keeps io.max/io.weight off the root.

`make_v1(root, parent, container_id)` builds the `blkio` hierarchy of cgroup v1 with bfq's
files, as a current kernel shows them (no cfq: `blkio.weight` is gone since Linux 5.0).

Writes to these files are plain appends, so after `apply_writes` a file holds its initial
content followed by the lines written, in order.
"""

from __future__ import annotations

from pathlib import Path

from enforcer.controllers.cgroups import cgroup_path

V2_CONTROLLERS = "cpuset cpu io memory hugetlb pids rdma misc"


def _write(folder: Path, files: dict[str, str]) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (folder / name).write_text(text)


def _v2_core(controllers: str) -> dict[str, str]:
    return {
        "cgroup.controllers": controllers + "\n",
        "cgroup.subtree_control": "",
        "cgroup.events": "populated 0\nfrozen 0\n",
        "cgroup.freeze": "0\n",
        "cgroup.max.depth": "max\n",
        "cgroup.max.descendants": "max\n",
        "cgroup.procs": "",
        "cgroup.stat": "nr_descendants 0\nnr_dying_descendants 0\n",
        "cgroup.threads": "",
        "cgroup.type": "domain\n",
        "cpu.pressure": "some avg10=0.00 avg60=0.00 avg300=0.00 total=0\n",
        "io.pressure": "some avg10=0.00 avg60=0.00 avg300=0.00 total=0\n",
    }


def make_v2(
    root: str | Path,
    cgroup_parent: str,
    container_id: str,
    *,
    io: bool = True,
    bfq: bool = False,
    threads: tuple[int, ...] = (),
) -> Path:
    """A v2 hierarchy under `root` down to the container's folder; returns that folder."""
    base = Path(root)
    enabled = V2_CONTROLLERS if io else V2_CONTROLLERS.replace(" io", "")
    top = _v2_core(V2_CONTROLLERS)
    top.pop("cgroup.type")  # the root has none
    top["cgroup.subtree_control"] = enabled + "\n"
    top["io.stat"] = ""
    _write(base, top)
    folder = Path(cgroup_path(None, cgroup_parent, container_id, str(base)))
    rel = folder.relative_to(base)
    level = base
    for part in rel.parts:
        level = level / part
        files = _v2_core(enabled)
        if level != folder:
            files["cgroup.subtree_control"] = enabled + "\n"
        else:
            files["cgroup.threads"] = "".join(f"{t}\n" for t in threads)
            files["cgroup.procs"] = f"{threads[0]}\n" if threads else ""  # the main thread
        if io:
            files.update({"io.max": "", "io.stat": "", "io.weight": "default 100\n"})
            if bfq:
                files["io.bfq.weight"] = "default 100\n"
        _write(level, files)
    return folder


def make_v1(
    root: str | Path, cgroup_parent: str, container_id: str, *, threads: tuple[int, ...] = ()
) -> Path:
    """The `blkio` hierarchy of cgroup v1 under `root` down to the container's folder."""
    base = Path(root)
    folder = Path(cgroup_path("blkio", cgroup_parent, container_id, str(base)))
    files = {
        "blkio.bfq.weight": "100\n",
        "blkio.bfq.weight_device": "default 100\n",
        "blkio.reset_stats": "",
        "blkio.throttle.io_service_bytes": "Total 0\n",
        "blkio.throttle.io_serviced": "Total 0\n",
        "blkio.throttle.read_bps_device": "",
        "blkio.throttle.read_iops_device": "",
        "blkio.throttle.write_bps_device": "",
        "blkio.throttle.write_iops_device": "",
        "cgroup.clone_children": "0\n",
        "cgroup.procs": "",
        "notify_on_release": "0\n",
        "tasks": "",
    }
    level = base / "blkio"
    _write(level, {k: v for k, v in files.items() if k.startswith(("blkio.throttle", "cgroup"))})
    for part in folder.relative_to(level).parts:
        level = level / part
        _write(level, files)
    (folder / "tasks").write_text("".join(f"{t}\n" for t in threads))
    return folder


def set_v2_cpuset(
    folder: str | Path, cpus: str, mems: str, *, node_cpus: str, node_mems: str
) -> None:
    """A v2 cpuset as the kernel shows it in ``folder``: ``cpuset.cpus``/``cpuset.mems`` as
    written (empty: nobody wrote one, the parent's apply), the ``.effective`` files with what is
    in effect, ``cpuset.cpus.partition`` a member. Also gives the root its ``.effective`` files
    (the v2 root has no ``cpuset.cpus`` of its own)."""
    at = Path(folder)
    _write(
        at,
        {
            "cpuset.cpus": f"{cpus}\n",
            "cpuset.mems": f"{mems}\n",
            "cpuset.cpus.effective": f"{cpus or node_cpus}\n",
            "cpuset.mems.effective": f"{mems or node_mems}\n",
            "cpuset.cpus.partition": "member\n",
        },
    )
    root = next(p for p in (at, *at.parents) if not (p.parent / "cgroup.controllers").exists())
    _write(
        root,
        {"cpuset.cpus.effective": f"{node_cpus}\n", "cpuset.mems.effective": f"{node_mems}\n"},
    )
