"""IRQ isolation as the engine drives it: with `irqIsolation.enabled`, device interrupts and
the default affinity are kept off the CPUs containers hold exclusively and off the kernel's
isolated CPUs; a released CPU gets its interrupts back; the enforcer stopping for good (and the
key turned off) puts every interrupt back, also from a process that starts after a crash (the
originals are in the state file). procfs is a faithful fake (tests/support/fake_procfs_irq.py);
this machine's /proc/irq is only read."""

from __future__ import annotations

import json
from pathlib import Path

from enforcer.configuration import parse_config
from enforcer.controllers.cpuset import CpusetController
from enforcer.controllers.group import Controllers
from enforcer.controllers.irq import IrqAffinity, cpus_to_mask, mask_to_cpus
from enforcer.controllers.irq_isolation import IrqIsolation
from enforcer.engine import Enforcer
from enforcer.engine.admission import UNKNOWN_SETTLE_SECONDS
from enforcer.engine.kubelet_record import KubeletRecord
from enforcer.state import StateStore
from enforcer.topology import CPUSet, Topology
from resource_contract.config import Config
from tests.engine.standins import Clock, StandInRuntime
from tests.engine.test_cpu_classes_engine import create_of
from tests.support.fake_procfs_irq import affinities, make_irqs

# 8 CPUs (0-7), CPU 7 isolated by the kernel (isolcpus).
MACHINE = Topology.synthetic(sockets=1, cores_per_node=8, threads_per_core=1, isolated="7")
ON = parse_config(
    {"policy": {"name": "static", "reservedCPUs": "0"}, "irqIsolation": {"enabled": True}}
)
IRQS = {
    24: ("ACPI:Ged", "0-7"),
    26: ("ttyS0", "0-7"),
    30: ("eth0", "2-3"),  # all its CPUs may be taken: it keeps them (an interrupt needs a CPU)
    31: ("nvme0q1", "5"),
}


def make(tmp_path: Path) -> Path:
    return make_irqs(tmp_path / "proc", IRQS, default="0-7", width=8)


def start(tmp_path: Path, proc: Path, config: Config = ON, clock: Clock | None = None) -> Enforcer:
    runtime = StandInRuntime()
    controllers = Controllers([CpusetController(runtime), IrqIsolation(str(proc), MACHINE)])
    controllers.configure(config)
    store = StateStore(tmp_path / "state")
    store.ensure_dir()
    e = Enforcer(
        topology=MACHINE,
        config=config,
        store=store,
        runtime=runtime,
        controllers=controllers,
        clock=clock or Clock(),
    )
    e.restore_saved()
    e.reconcile()
    return e


def run(e: Enforcer, name: str, cpu: str) -> tuple[str, CPUSet]:
    key, pinning = e.create(
        create_of(name, cpu, {}), sandbox_id=f"s-{name}", resources=KubeletRecord()
    )
    runtime = e.runtime
    assert isinstance(runtime, StandInRuntime)
    cid = f"cid-{name}"
    runtime.add(cid, key)
    runtime.cpus[cid] = pinning.cpus
    e.created(key, cid)
    e.started(cid)
    return cid, CPUSet.parse(pinning.cpus)


def test_interrupts_leave_exclusive_and_isolated_cpus_and_come_back(tmp_path: Path) -> None:
    proc = make(tmp_path)
    before = affinities(proc)
    e = start(tmp_path, proc)
    # Nobody holds CPUs yet: only the isolated CPU 7 is kept free.
    now = affinities(proc)
    assert now["24"] == "0-6" and now["26"] == "0-6" and now["30"] == "2-3"
    assert mask_to_cpus(now["default"]) == CPUSet.parse("0-6")

    cid, held = run(e, "db", "2")
    assert len(held) == 2
    off = held | {7}
    now = affinities(proc)
    for irq in ("24", "26"):
        assert CPUSet.parse(now[irq]) == CPUSet.parse("0-7") - off
    assert mask_to_cpus(now["default"]) == CPUSet.parse("0-7") - off
    assert CPUSet.parse(now["30"]) == (CPUSet.parse("2-3") - off or CPUSet.parse("2-3"))

    e.container_gone(cid, "stopped by kubelet", removed=True)
    now = affinities(proc)
    assert now["24"] == "0-6" and mask_to_cpus(now["default"]) == CPUSet.parse("0-6")

    e.shutdown()  # uninstall: every interrupt where it was
    assert affinities(proc) == before


def test_the_originals_survive_a_crash_in_the_state_file(tmp_path: Path) -> None:
    proc = make(tmp_path)
    before = affinities(proc)
    e = start(tmp_path, proc)
    run(e, "db", "3")
    saved = json.loads((tmp_path / "state" / "state.json").read_text())
    assert saved["controllers"]["irq"]["originals"]["24"] == "0-7"
    narrowed = affinities(proc)
    assert narrowed != before

    # A crash; the next process finds the narrowed values, and a runtime without the container
    # (it is released once its creation has settled: the runtime might still have been making
    # it): from the saved originals its CPUs get their interrupts back, which the narrowed
    # values, taken for originals, would never give.
    clock = Clock()
    e2 = start(tmp_path, proc, clock=clock)
    clock.now += UNKNOWN_SETTLE_SECONDS
    e2.maintain()
    assert affinities(proc)["24"] == "0-6"
    e2.shutdown()
    assert affinities(proc) == before


def test_turned_off_by_a_reload_puts_everything_back(tmp_path: Path) -> None:
    proc = make(tmp_path)
    before = affinities(proc)
    e = start(tmp_path, proc)
    run(e, "db", "2")
    assert affinities(proc) != before
    off = parse_config({"policy": {"name": "static", "reservedCPUs": "0"}})
    e.reconfigure(off)
    assert affinities(proc) == before


def test_off_by_default_nothing_is_written(tmp_path: Path) -> None:
    proc = make(tmp_path)
    before = affinities(proc)
    e = start(tmp_path, proc, parse_config({"policy": {"name": "static", "reservedCPUs": "0"}}))
    run(e, "db", "2")
    e.shutdown()
    assert affinities(proc) == before


def test_an_interrupt_procfs_cannot_show_is_left_alone(tmp_path: Path) -> None:
    proc = make(tmp_path)
    broken = proc / "irq" / "26" / "smp_affinity_list"
    broken.unlink()
    broken.mkdir()  # neither readable nor writable as a file
    e = start(tmp_path, proc)
    run(e, "db", "2")
    assert broken.is_dir()
    assert CPUSet.parse(affinities_without(proc, "26")["24"]) <= CPUSet.parse("0-6")


def affinities_without(proc: Path, skip: str) -> dict[str, str]:
    base = proc / "irq"
    return {
        f.name: (f / "smp_affinity_list").read_text().strip()
        for f in base.iterdir()
        if f.name.isdigit() and f.name != skip
    }


def test_this_machines_interrupts_read_only() -> None:
    """The real /proc/irq, read and planned for, nothing written: every interrupt's list and
    the default mask parse, and a plan keeping CPU 0 free leaves each a CPU."""
    real = IrqAffinity("/proc")
    found = real.read_all()
    assert "default" in found
    online = CPUSet.parse(Path("/sys/devices/system/cpu/online").read_text().strip())
    width = max(online) + 1
    for irq, cpus in found.items():
        parsed = CPUSet.parse(cpus)
        assert parsed, f"IRQ {irq} has no CPU"
        want = (parsed - {0}) or parsed
        assert want and want <= parsed
    default = Path("/proc/irq/default_smp_affinity").read_text().strip()
    assert cpus_to_mask(mask_to_cpus(default), width) == default  # printed as the kernel does
    assert len(real.irqs()) == len([d for d in Path("/proc/irq").iterdir() if d.name.isdigit()])
