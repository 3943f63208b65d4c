"""Memory classes and CPU burst (cgroup v2) as the engine drives them: a container's class, by
annotation or by its balloon type, written to memory.min/low/high/swap.max as ratios of its
limit or as quantities, cpu.max.burst from `cpuBurst`; drift repaired by the sweep, the kernel's
defaults back when the class is dropped or the container released. On cgroup v1 (this machine)
such a configuration is refused when it is read, naming the key: by the controllers the daemons
build, by `run` and `nri`, and by `check-config`. The v2 tree is a faithful fake
(tests/support/fake_cgroup2_qos.py); the write module takes its root as a parameter, so the same
code runs on the cgroup v2 VM."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from enforcer.configuration import parse_config
from enforcer.controllers.base import Roots
from enforcer.controllers.cgroups import cgroup_path
from enforcer.controllers.cpuset import CpusetController
from enforcer.controllers.group import Controllers
from enforcer.controllers.memory_classes import MemoryClasses
from enforcer.controllers.registry import node_controllers
from enforcer.controllers.scheduling_classes import SchedulingClasses
from enforcer.engine import Enforcer
from enforcer.engine.kubelet_record import KubeletRecord
from enforcer.state import StateStore
from resource_contract.config import Config, ConfigError
from tests.engine.standins import MACHINE, Clock, StandInRuntime
from tests.engine.test_cpu_classes_engine import create_of
from tests.support.fake_cgroup import make_v1
from tests.support.fake_cgroup2_qos import DEFAULTS, make_qos_folder, qos_values

KEY = "memoryclass.resource-enforcer.dev"
LIMIT = 64 << 20  # tests.support.pods.guaranteed's memory
PAGE = os.sysconf("SC_PAGE_SIZE")
CLASSES = {
    "memoryClasses": {
        "protected": {"min": "50%", "high": "90%", "swapMax": "0"},
        "fixed": {"low": "16Mi", "swapMax": "max"},
    },
    "schedulingClasses": {"bursty": {"cpuBurst": "500m"}},
}
CONFIG = parse_config({"policy": {"name": "static", "reservedCPUs": "0"}, **CLASSES})


def pages(n: float) -> str:
    """A byte count as the kernel keeps it: whole pages."""
    return str(int(n) // PAGE * PAGE)


def start(cgroupfs: Path, tmp_path: Path, config: Config = CONFIG) -> Enforcer:
    runtime = StandInRuntime()
    root = str(cgroupfs)
    controllers = Controllers(
        [CpusetController(runtime), SchedulingClasses(root), MemoryClasses(root)]
    )
    controllers.configure(config)
    store = StateStore(tmp_path / "state")
    store.ensure_dir()
    e = Enforcer(
        topology=MACHINE,
        config=config,
        store=store,
        runtime=runtime,
        controllers=controllers,
        clock=Clock(),
    )
    e.restore_saved()
    e.reconcile()
    return e


def run(e: Enforcer, cgroupfs: Path, name: str, annotations: dict[str, str]) -> tuple[str, Path]:
    """Creates and starts a 1-CPU, 64Mi container (cpu.max as kubelet sets it); its id and
    its cgroup v2 folder."""
    create = create_of(name, "1", annotations)
    key, pinning = e.create(create, sandbox_id=f"sandbox-{name}", resources=KubeletRecord())
    runtime = e.runtime
    assert isinstance(runtime, StandInRuntime)
    cid = f"cid-{name}"
    runtime.add(cid, key)
    runtime.cpus[cid] = pinning.cpus
    e.created(key, cid)
    folder = make_qos_folder(
        cgroupfs, create.cgroup_parent, cid, memory_max=LIMIT, cpu_max="100000 100000"
    )
    assert str(folder) == cgroup_path(None, create.cgroup_parent, cid, str(cgroupfs))
    e.started(cid)
    return cid, folder


def test_ratios_of_the_limit_are_written_drift_repaired_and_defaults_put_back(
    tmp_path: Path,
) -> None:
    cgroupfs = tmp_path / "cgroup"
    e = start(cgroupfs, tmp_path)
    cid, folder = run(e, cgroupfs, "db", {f"{KEY}/container.app": "protected"})
    assert qos_values(folder) == {
        **DEFAULTS,
        "memory.min": pages(LIMIT * 0.5),
        "memory.high": pages(LIMIT * 0.9),
        "memory.swap.max": "0",
    }

    (folder / "memory.high").write_text("max\n")  # someone else's write
    e.sweep()
    assert qos_values(folder)["memory.high"] == pages(LIMIT * 0.9)

    e.container_gone(cid, "stopped by kubelet", removed=True)
    assert qos_values(folder) == DEFAULTS


def test_quantities_from_the_pod_annotation_and_a_class_dropped_by_a_reload(
    tmp_path: Path,
) -> None:
    cgroupfs = tmp_path / "cgroup"
    e = start(cgroupfs, tmp_path)
    _, folder = run(e, cgroupfs, "web", {f"{KEY}/pod": "fixed"})
    assert qos_values(folder) == {**DEFAULTS, "memory.low": str(16 << 20)}
    without = parse_config(
        {"policy": {"name": "static", "reservedCPUs": "0"}, "memoryClasses": {"other": {}}}
    )
    e.reconfigure(without)
    assert qos_values(folder) == DEFAULTS


def test_a_balloon_types_classes_without_annotations(tmp_path: Path) -> None:
    config = parse_config(
        {
            **CLASSES,
            "policy": {
                "name": "balloons",
                "reservedCPUs": "0",
                "balloonTypes": [
                    {
                        "name": "batch",
                        "namespaces": ["e2e"],
                        "memoryClass": "protected",
                        "schedulingClass": "bursty",
                    }
                ],
            },
        }
    )
    cgroupfs = tmp_path / "cgroup"
    e = start(cgroupfs, tmp_path, config)
    _, folder = run(e, cgroupfs, "job", {})
    values = qos_values(folder)
    assert values["memory.min"] == pages(LIMIT * 0.5)
    assert values["cpu.max.burst"] == "50000"  # half of the 100000 us period
    (folder / "cpu.max.burst").write_text("0\n")
    e.sweep()
    assert qos_values(folder)["cpu.max.burst"] == "50000"


def test_on_cgroup_v1_the_controllers_refuse_the_classes_naming_the_keys(tmp_path: Path) -> None:
    v1 = tmp_path / "v1"
    make_v1(v1, "/kubepods", "c")
    with pytest.raises(ConfigError) as refused:
        node_controllers(Roots(cgroupfs=str(v1), sysfs=None, resctrl=None), MACHINE).configure(
            CONFIG
        )
    problems = refused.value.problems
    assert any(p.startswith("memoryClasses.protected: ") and "cgroup v2" in p for p in problems)
    assert any(p.startswith("memoryClasses.fixed: ") for p in problems)
    assert any(p.startswith("schedulingClasses.bursty.cpuBurst: ") for p in problems)
    # Without them the same node takes the configuration.
    node_controllers(Roots(cgroupfs=str(v1), sysfs=None, resctrl=None), MACHINE).configure(
        parse_config({"schedulingClasses": {"quiet": {"nice": 5}}})
    )


EXE = str(Path(sys.executable).parent / "resource-enforcer")
YAML = """\
memoryClasses:
  protected: {min: "50%"}
schedulingClasses:
  bursty: {cpuBurst: "1"}
"""


def test_check_config_refuses_on_v1_and_accepts_on_v2(tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_text(YAML)
    v1, v2 = tmp_path / "v1", tmp_path / "v2"
    make_v1(v1, "/kubepods", "c")
    make_qos_folder(v2, "/kubepods", "c", memory_max=LIMIT)
    out = subprocess.run(
        [EXE, "check-config", str(path), "--cgroupfs-root", str(v1)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 1
    assert "memoryClasses.protected: memory classes need cgroup v2" in out.stdout
    assert "schedulingClasses.bursty.cpuBurst: CPU burst needs cgroup v2" in out.stdout
    assert "Traceback" not in out.stderr
    ok = subprocess.run(
        [EXE, "check-config", str(path), "--cgroupfs-root", str(v2)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert ok.returncode == 0, ok.stdout + ok.stderr


@pytest.mark.parametrize("command", ["run", "nri"])
def test_the_daemons_refuse_memory_classes_on_v1(tmp_path: Path, command: str) -> None:
    """Refusal at start, before any socket is touched, one line naming the key."""
    path = tmp_path / "config.yaml"
    path.write_text(YAML)
    v1 = tmp_path / "v1"
    make_v1(v1, "/kubepods", "c")
    sockets = ["--runtime-socket", str(tmp_path / "none.sock")]
    sockets += ["--relay-socket", str(tmp_path / "relay.sock")]
    if command == "nri":
        sockets = ["--nri-socket", str(tmp_path / "none.sock")]
    out = subprocess.run(
        [EXE, command, "--config", str(path), "--state-dir", str(tmp_path / "state"),
         "--cgroupfs-root", str(v1), "--metrics-address", "", *sockets],
        capture_output=True,
        text=True,
        timeout=120,
    )  # fmt: skip
    assert out.returncode == 1
    assert "configuration refused: memoryClasses.protected: memory classes need cgroup v2" in (
        out.stderr
    ), out.stderr
    assert "Traceback" not in out.stderr
