"""Text views for operators: container rows and the CPU map (pure: data in, text out)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from enforcer.decode import ContainerRequest
from enforcer.engine import ContainerView
from enforcer.policy import BalloonView, Policy, PoolView
from enforcer.policy.pool_math import format_bytes
from enforcer.topology import CPUSet, Topology


def container_table(rows: Sequence[ContainerView]) -> str:
    """One row per container; the ID column only where containers exist (not in a plan)."""
    with_ids = any(r.container_id for r in rows)
    header = (
        "NAMESPACE",
        "POD",
        "CONTAINER",
        "QOS",
        "KIND",
        "POOL",
        "CPUS",
        "MEMS",
        "RDT",
        "BLOCKIO",
        "CPU-CLASS",
        "ID",
    )
    lines = [header]
    for r in sorted(rows, key=lambda r: (r.namespace, r.pod, r.container)):
        lines.append(
            (
                r.namespace,
                r.pod,
                r.container,
                r.qos,
                r.kind,
                r.pool,
                r.cpus if r.cpus is not None else "-",
                r.mems if r.mems is not None else "-",
                r.rdt_class or "-",
                r.blockio_class or "-",
                r.cpu_class or "-",
                (r.container_id or "pending")[:13],
            )
        )
    return _columns(lines if with_ids else [line[:-1] for line in lines])


@dataclass(frozen=True)
class CpuCell:
    """One CPU of the map: where it sits and who holds it."""

    cpu: int
    socket: int
    node: int
    core: int
    isolated: bool
    # exclusive (see holder), reserved, shared, idle (isolated, kept for exclusive use), or
    # unavailable (outside availableCPUs)
    use: str
    holder: str | None  # NAMESPACE/POD/CONTAINER holding it exclusively
    runs_shared: bool  # shared containers run on it


def cpu_cells(
    topology: Topology,
    rows: Iterable[ContainerView],
    *,
    reserved: CPUSet,
    available: CPUSet,
    reserved_shared: bool = True,
) -> list[CpuCell]:
    """Every CPU, by socket, NUMA node and core, with who holds it (see `cpu_map`)."""
    holders: dict[int, str] = {}
    claimed: set[int] = set()
    for r in rows:
        if r.kind == "claimed":  # runs on its claims' CPUs: the claim is their holder
            continue
        for cpu in CPUSet.parse(r.exclusive):
            if r.kind == "claim":  # a prepared DRA claim: pod is its name
                holders[cpu] = f"claim:{r.namespace}/{r.pod}"
                claimed.add(cpu)
            else:
                holders[cpu] = f"{r.namespace}/{r.pod}/{r.container}"
    cells = []
    for socket in topology.sockets():
        for node in topology.nodes_of_socket(socket):
            cpus = topology.cpus_of_node(node)
            for core in sorted({topology.cpus[c].core for c in cpus}):
                for cpu in topology.cpus_of_core(core).sorted():
                    isolated = topology.cpus[cpu].isolated
                    if cpu in claimed:
                        use = "claimed"
                    elif cpu in holders:
                        use = "exclusive"
                    elif cpu not in available:
                        use = "unavailable"
                    elif cpu in reserved:
                        use = "reserved"
                    elif not reserved_shared and isolated:
                        use = "idle"
                    else:
                        use = "shared"
                    cells.append(
                        CpuCell(
                            cpu=cpu,
                            socket=socket,
                            node=node,
                            core=core,
                            isolated=isolated,
                            use=use,
                            holder=holders.get(cpu),
                            runs_shared=use == "shared" or (use == "reserved" and reserved_shared),
                        )
                    )
    return cells


def cpu_map(
    topology: Topology,
    rows: Iterable[ContainerView],
    *,
    reserved: CPUSet,
    available: CPUSet,
    reserved_shared: bool = True,
) -> str:
    """Every CPU by socket, NUMA node and core, with who holds it.

    `reserved_shared`: whether the policy runs shared containers on reserved and isolated CPUs
    (static does; topology-aware keeps reserved CPUs for their own containers and isolated
    ones idle until a container is given one)."""
    cells = cpu_cells(
        topology, rows, reserved=reserved, available=available, reserved_shared=reserved_shared
    )
    out: list[str] = []
    place: tuple[int, int, int] | None = None  # the socket, node and core being written
    for cell in cells:
        if place is None or cell.socket != place[0]:
            out.append(f"socket {cell.socket}")
        if place is None or cell.node != place[1] or cell.socket != place[0]:
            out.append(f"  node {cell.node} (cpus {topology.cpus_of_node(cell.node)})")
        if place != (cell.socket, cell.node, cell.core):
            out.append(f"    core {cell.core}:")
            sep = " "
        place = (cell.socket, cell.node, cell.core)
        who = cell.holder or cell.use
        if cell.use == "reserved" and cell.runs_shared:
            who = "reserved+shared"
        if cell.isolated:
            who += ",isolated"
        out[-1] += f"{sep}cpu{cell.cpu}={who}"
        sep = "  "
    memory_only = topology.memory_only_nodes()
    if memory_only:
        out.append(f"memory-only nodes: {', '.join(map(str, memory_only))}")
    return "\n".join(out)


def pool_table(pools: Sequence[PoolView]) -> str:
    """The pool tree, one row per pool, children indented under their parent."""
    header = (
        "POOL",
        "CPUS",
        "SHARED",
        "EXCLUSIVE",
        "FREE",
        "SHARED-REQ",
        "CONTAINERS",
        "MEMS",
        "MEMORY USED/CAPACITY",
        "CPU LIST",
    )
    lines = [header]
    for p in pools:
        memory = "-"
        if p.memory_capacity:
            memory = f"{format_bytes(p.memory_used)}/{format_bytes(p.memory_capacity)}"
        lines.append(
            (
                "  " * p.depth + p.name,
                str(len(p.cpus)),
                str(len(p.shared)),
                str(len(p.exclusive)),
                str(p.free),
                f"{p.shared_milli}m",
                str(p.containers),
                str(p.mems) or "-",
                memory,
                str(p.cpus),
            )
        )
    return _columns(lines)


def placements_report(topology: Topology, policy: Policy, rows: Sequence[ContainerView]) -> str:
    """The containers, the pool tree (for policies with pools) and the CPU map."""
    parts = [container_table(rows) if rows else "no containers"]
    if troubled := [r for r in rows if r.problem]:
        parts.append(
            "\n".join(
                f"PROBLEM {r.namespace}/{r.pod}/{r.container} ({r.phase or 'unknown'}): {r.problem}"
                for r in troubled
            )
        )
    if balloons := policy.balloon_views():
        parts.append(
            balloon_table(balloons, {k: _name(a.request) for k, a in policy.admitted.items()})
        )
    elif pools := policy.pools():
        parts.append(pool_table(pools))
    if classes := policy.cpu_classes():
        parts.append(cpu_class_table(classes))
    parts.append(
        cpu_map(
            topology,
            rows,
            reserved=policy.reserved,
            available=policy.available,
            reserved_shared=policy.reserved_shared,
        )
    )
    return "\n\n".join(parts)


def balloon_table(balloons: Sequence[BalloonView], names: dict[str, str]) -> str:
    """One row per balloon: type, instance, CPUs, idle CPUs shared, CPU class, containers."""
    lines = [("BALLOON", "TYPE", "CPUS", "REQUESTED", "IDLE-SHARED", "CPU-CLASS", "CONTAINERS")]
    for b in balloons:
        lines.append(
            (
                b.name,
                b.type,
                str(b.cpus) or "-",
                f"{b.milli}m",
                str(b.shared_idle) or "-",
                b.cpu_class or "-",
                ", ".join(sorted(names.get(k, k) for k in b.containers)) or "-",
            )
        )
    return _columns(lines)


def cpu_classes_by_name(classes: Mapping[int, str]) -> dict[str, CPUSet]:
    """CPU -> class turned round: each CPU class and its CPUs, by name."""
    out: dict[str, CPUSet] = {}
    for name in sorted(set(classes.values())):
        out[name] = CPUSet(cpu for cpu, cls in classes.items() if cls == name)
    return out


def cpu_class_table(classes: Mapping[int, str]) -> str:
    """One row per CPU class in use: its name, how many CPUs and which."""
    lines = [("CPU-CLASS", "CPUS", "CPU LIST")]
    for name, cpus in cpu_classes_by_name(classes).items():
        lines.append((name, str(len(cpus)), str(cpus)))
    return _columns(lines)


def _name(request: ContainerRequest) -> str:
    return f"{request.namespace}/{request.pod_name}/{request.container}"


def _columns(lines: Sequence[Sequence[str]]) -> str:
    widths = [max(len(str(line[i])) for line in lines) for i in range(len(lines[0]))]
    return "\n".join(
        "  ".join(str(cell).ljust(w) for cell, w in zip(line, widths, strict=True)).rstrip()
        for line in lines
    )
