"""Scheduling classes as the engine drives them, on real processes: the class a container's
annotation (or its balloon type) names is written to every thread of the container once it
runs, a process forked into it later gets it from the verification sweep, and a release puts the
kernel's defaults back. The truth is read with util-linux's `chrt` and `ionice` and from procfs,
never from the enforcer. The container's cgroup is a folder with the kernel's `tasks` format
listing the real threads (this machine runs as root; no cgroup is touched)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from enforcer.configuration import parse_config
from enforcer.controllers.cgroups import cgroup_path
from enforcer.controllers.cpuset import CpusetController
from enforcer.controllers.group import Controllers
from enforcer.controllers.scheduling_classes import SchedulingClasses
from enforcer.engine import Enforcer
from enforcer.engine.kubelet_record import KubeletRecord
from enforcer.refusal import Reason, Refusal
from enforcer.state import StateStore
from resource_contract.config import Config
from tests.engine.standins import MACHINE, Clock, StandInRuntime
from tests.engine.test_cpu_classes_engine import create_of
from tests.support.sched_truth import ionice_of, nice_of, policy_of, rt_priority_of

KEY = "schedulingclass.resource-enforcer.dev"
CONFIG = parse_config(
    {
        "policy": {"name": "static", "reservedCPUs": "0"},
        "schedulingClasses": {
            "background": {"policy": "idle", "nice": 10, "ioClass": "idle"},
            "batchy": {"policy": "batch", "nice": 5, "ioClass": "be", "ioPriority": 6},
            "realtime": {"policy": "rr", "priority": 5},
        },
        "classAccess": {"scheduling": {"realtime": ["e2e", "rt-*"]}},
    }
)
TOOLS = ("chrt", "ionice")


@pytest.fixture(autouse=True)
def _tools() -> None:
    missing = [t for t in TOOLS if shutil.which(t) is None]
    if missing:  # in CI a missing tool fails the run, never skips (.ci/system-deps.sh)
        reason = f"needs {', '.join(missing)} (util-linux)"
        if os.environ.get("CI") == "true":
            pytest.fail(reason, pytrace=False)
        pytest.skip(reason)
    assert not missing, f"util-linux's {', '.join(missing)} missing"


@pytest.fixture
def procs() -> Iterator[list[subprocess.Popen[bytes]]]:
    started: list[subprocess.Popen[bytes]] = []
    yield started
    for p in started:
        p.kill()
        p.wait()


# A process with a second thread: "every task" means threads too.
THREADED = "import threading, time; threading.Thread(target=time.sleep, args=(300,)).start(); "
THREADED += "print('up', flush=True); time.sleep(300)"


def spawn(procs: list[subprocess.Popen[bytes]]) -> list[int]:
    """A real process with two threads; its thread ids."""
    p = subprocess.Popen([sys.executable, "-c", THREADED], stdout=subprocess.PIPE)
    procs.append(p)
    assert p.stdout is not None and p.stdout.readline() == b"up\n"
    return sorted(int(t) for t in os.listdir(f"/proc/{p.pid}/task"))


def start(tmp_path: Path, config: Config = CONFIG) -> Enforcer:
    runtime = StandInRuntime()
    controllers = Controllers(
        [CpusetController(runtime), SchedulingClasses(str(tmp_path / "cgroup"))]
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


def run(
    e: Enforcer, tmp_path: Path, name: str, annotations: dict[str, str], tids: list[int]
) -> tuple[str, Path]:
    """Creates a container whose cgroup lists `tids` and starts it; its id and `tasks` file."""
    create = create_of(name, "1", annotations)
    key, pinning = e.create(create, sandbox_id=f"sandbox-{name}", resources=KubeletRecord())
    runtime = e.runtime
    assert isinstance(runtime, StandInRuntime)
    cid = f"cid-{name}"
    runtime.add(cid, key)
    runtime.cpus[cid] = pinning.cpus
    e.created(key, cid)
    tasks = Path(cgroup_path("cpu", create.cgroup_parent, cid, str(tmp_path / "cgroup"))) / "tasks"
    tasks.parent.mkdir(parents=True)
    tasks.write_text("".join(f"{t}\n" for t in tids))
    e.started(cid)
    return cid, tasks


def test_every_thread_gets_the_class_forked_ones_at_the_sweep_and_defaults_at_release(
    tmp_path: Path, procs: list[subprocess.Popen[bytes]]
) -> None:
    e = start(tmp_path)
    first = spawn(procs)
    cid, tasks = run(e, tmp_path, "quiet", {f"{KEY}/container.app": "background"}, first)
    for tid in first:
        assert policy_of(tid) == "SCHED_IDLE"
        assert nice_of(tid) == 10
        assert ionice_of(tid) == "idle"

    # A process forked into the container later (an exec) does not inherit the class.
    later = spawn(procs)
    tasks.write_text("".join(f"{t}\n" for t in first + later))
    assert policy_of(later[0]) == "SCHED_OTHER"
    e.sweep()
    for tid in later:
        assert policy_of(tid) == "SCHED_IDLE"
        assert nice_of(tid) == 10
        assert ionice_of(tid) == "idle"
    assert e.registry.entries[e.registry.by_container(cid).key].problem is None  # type: ignore[union-attr]

    # Released while its threads still run: the kernel's defaults for what the class set.
    e.container_gone(cid, "stopped by kubelet", removed=True)
    for tid in first + later:
        assert policy_of(tid) == "SCHED_OTHER"
        assert nice_of(tid) == 0
        assert ionice_of(tid).startswith("none")


def test_the_pod_annotation_applies_when_the_container_has_none_and_levels_are_written(
    tmp_path: Path, procs: list[subprocess.Popen[bytes]]
) -> None:
    e = start(tmp_path)
    tids = spawn(procs)
    run(e, tmp_path, "batchy", {f"{KEY}/pod": "batchy"}, tids)
    for tid in tids:
        assert policy_of(tid) == "SCHED_BATCH"
        assert nice_of(tid) == 5
        assert ionice_of(tid) == "best-effort: prio 6"


def test_a_real_time_class_where_it_is_allowed(
    tmp_path: Path, procs: list[subprocess.Popen[bytes]]
) -> None:
    e = start(tmp_path)
    tids = spawn(procs)
    run(e, tmp_path, "rt", {f"{KEY}/container.app": "realtime"}, tids)
    for tid in tids:
        assert policy_of(tid) == "SCHED_RR"
        assert rt_priority_of(tid) == 5


def test_refused_classes_name_the_annotation_and_write_nothing(tmp_path: Path) -> None:
    config = parse_config(
        {
            **CONFIG.model_dump(exclude_defaults=True),
            "classAccess": {"scheduling": {"realtime": ["rt-*"]}},
        }
    )
    e = start(tmp_path, config)
    with pytest.raises(Refusal) as refused:
        e.create(
            create_of("x", "1", {f"{KEY}/pod": "realtime"}),
            sandbox_id="s",
            resources=KubeletRecord(),
        )
    assert refused.value.reason is Reason.FORBIDDEN
    assert f'"{KEY}/pod"' in str(refused.value) and "rt-*" in str(refused.value)
    with pytest.raises(Refusal) as unknown:
        e.create(
            create_of("y", "1", {f"{KEY}/pod": "turbo"}), sandbox_id="s", resources=KubeletRecord()
        )
    assert unknown.value.reason is Reason.BAD_REQUEST
    assert "background, batchy, realtime" in str(unknown.value)
    assert not e.registry.entries


def test_a_thread_that_exits_meanwhile_is_no_failure(
    tmp_path: Path, procs: list[subprocess.Popen[bytes]]
) -> None:
    e = start(tmp_path)
    tids = spawn(procs)
    gone = subprocess.Popen(["true"])
    gone.wait()
    cid, _ = run(e, tmp_path, "racy", {f"{KEY}/pod": "background"}, [gone.pid, *tids])
    assert all(policy_of(t) == "SCHED_IDLE" for t in tids)
    e.sweep()
    assert e.registry.entries[e.registry.by_container(cid).key].problem is None  # type: ignore[union-attr]
