"""CPU classes as the engine drives them through the controller interface: a balloon type's
`cpuClass` written on the balloon's CPUs from the start, the values found there kept in the
state file, and put back at a stop, also by the process that starts after a crash. The sysfs
is a fake laid out as the kernel documents it (tests/controllers/test_cpuclass.py)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from enforcer.configuration import parse_config
from enforcer.controllers.cpu_classes import CpuClasses
from enforcer.controllers.cpuset import CpusetController
from enforcer.controllers.group import Controllers
from enforcer.engine import Enforcer
from enforcer.state import StateStore
from tests.engine.test_engine_core import Clock, StandInRuntime

sys.path.insert(0, str(Path(__file__).parents[1] / "controllers"))
from test_cpuclass import MACHINE, make_sysfs, read, snapshot

CONFIG = parse_config(
    {
        "policy": {
            "name": "balloons",
            "reservedCPUs": "0",
            "balloonTypes": [
                {
                    "name": "fast",
                    "namespaces": ["ai"],
                    "minCPUs": 2,
                    "maxCPUs": 4,
                    "minBalloons": 1,
                    "cpuClass": "turbo",
                }
            ],
        },
        "cpuClasses": {"turbo": {"maxFreq": 3800000, "disabledCstates": ["C6"]}},
    }
)


def values(sysfs: Path) -> dict[str, str]:
    """Every file's value (sysfs shows each with a newline, whatever was written)."""
    return {name: text.strip() for name, text in snapshot(sysfs).items()}


def start(tmp_path: Path, sysfs: Path) -> Enforcer:
    runtime = StandInRuntime()
    controllers = Controllers([CpusetController(runtime), CpuClasses(str(sysfs), MACHINE)])
    controllers.configure(CONFIG)
    store = StateStore(tmp_path / "state")
    store.ensure_dir()
    e = Enforcer(
        topology=MACHINE,
        config=CONFIG,
        store=store,
        runtime=runtime,
        controllers=controllers,
        clock=Clock(),
    )
    e.restore_saved()
    e.reconcile()
    return e


def test_a_balloons_cpu_class_is_written_remembered_and_put_back(tmp_path: Path) -> None:
    sysfs = make_sysfs(tmp_path / "sys")
    before = values(sysfs)
    e = start(tmp_path, sysfs)
    (balloon,) = [b for b in e.policy.balloon_views() if b.type == "fast"]
    assert len(balloon.cpus) == 2
    for cpu in MACHINE.cpus:
        turbo = cpu in balloon.cpus
        assert read(sysfs, f"cpu{cpu}/cpufreq/scaling_max_freq") == (
            "3800000" if turbo else "3000000"
        )
        assert read(sysfs, f"cpu{cpu}/cpuidle/state3/disable") == ("1" if turbo else "0")
    # The values found there are in the state file before anything else can be lost.
    saved = json.loads((tmp_path / "state" / "state.json").read_text())
    remembered = saved["controllers"]["cpuclass"]["remembered"]
    cpu = min(balloon.cpus)
    assert remembered[f"devices/system/cpu/cpu{cpu}/cpufreq/scaling_max_freq"] == "3000000"

    # A crash: the next process, started on the same state, puts back the originals at its stop
    # although the files it found held the class's values.
    e2 = start(tmp_path, sysfs)
    assert read(sysfs, f"cpu{cpu}/cpufreq/scaling_max_freq") == "3800000"
    e2.shutdown()
    assert values(sysfs) == before
