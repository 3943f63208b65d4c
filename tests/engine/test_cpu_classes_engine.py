"""CPU classes as the engine drives them through the controller interface: a balloon type's
`cpuClass` written on the balloon's CPUs from the start, the values found there kept in the
state file, and put back at a stop, also by the process that starts after a crash; under
topology-aware, the class a container's `cpuclass` annotation names written on its exclusive
CPUs while it holds them. The sysfs is a fake laid out as the kernel documents it
(tests/support/fake_cpufreq.py)."""

from __future__ import annotations

import json
import logging
import re
import uuid
from pathlib import Path

import pytest

from enforcer.commands.status import status
from enforcer.configuration import parse_config
from enforcer.controllers.cpu_classes import CpuClasses
from enforcer.controllers.cpuset import CpusetController
from enforcer.controllers.group import Controllers
from enforcer.cri import api_pb2
from enforcer.cri.convert import container_create
from enforcer.decode import ContainerCreate
from enforcer.engine import Enforcer
from enforcer.engine.kubelet_record import KubeletRecord
from enforcer.refusal import Reason, Refusal
from enforcer.state import StateStore
from enforcer.topology import CPUSet
from resource_contract.config import Config
from tests.engine.standins import Clock, StandInRuntime
from tests.support.fake_cpufreq import (
    MACHINE,
    SCALING_MAX,
    class_files,
    make_sysfs,
    read,
    snapshot,
)
from tests.support.kubelet import container_config_for, sandbox_config_for
from tests.support.pods import guaranteed, manifest, sleeper

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


def start(tmp_path: Path, sysfs: Path, config: Config = CONFIG) -> Enforcer:
    runtime = StandInRuntime()
    controllers = Controllers([CpusetController(runtime), CpuClasses(str(sysfs), MACHINE)])
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


@pytest.mark.parametrize("where", ["elsewhere", "checksum-cut-off", "in-the-originals"])
def test_a_state_file_damaged_elsewhere_still_gives_back_the_originals(
    tmp_path: Path, where: str
) -> None:
    """A flipped byte that leaves JSON sets the whole state file aside (its checksum), and the
    containers are adopted from the runtime; but no runtime knows the values the CPU classes
    replaced: their section has its own checksum and is kept when that matches. Damaged
    itself, it is not trusted: nothing is put back rather than a wrong value."""
    sysfs = make_sysfs(tmp_path / "sys")
    before = values(sysfs)
    e = start(tmp_path, sysfs)
    (balloon,) = [b for b in e.policy.balloon_views() if b.type == "fast"]
    cpu = min(balloon.cpus)
    path = tmp_path / "state" / "state.json"
    raw = path.read_bytes()
    if where == "elsewhere":
        damaged = raw.replace(b'"policy":', b'"pol1cy":', 1)
    elif where == "checksum-cut-off":
        damaged = re.sub(rb',"crc32":"[0-9a-f]{8}"\}$', b"}", raw)
    else:
        damaged = raw.replace(b'"3000000"', b'"3000001"', 1)
    assert damaged != raw
    path.write_bytes(damaged)

    e2 = start(tmp_path, sysfs)  # a crash, then the next process on the damaged folder
    assert list(path.parent.glob("state.json.corrupt-*"))
    assert read(sysfs, f"cpu{cpu}/cpufreq/scaling_max_freq") == "3800000"
    e2.shutdown()
    if where != "in-the-originals":
        assert values(sysfs) == before
    else:  # the class's values stay: nothing was written from the damaged section
        assert read(sysfs, f"cpu{cpu}/cpufreq/scaling_max_freq") == "3800000"
        assert "3000001" not in values(sysfs).values()


TOPOLOGY_AWARE = parse_config(
    {
        "policy": {"name": "topology-aware", "reservedCPUs": "0"},
        "cpuClasses": {
            "turbo": {"maxFreq": 3800000, "disabledCstates": ["C6"]},
            "eco": {"maxFreq": 1200000},
        },
    }
)
ANNOTATION = "cpuclass.resource-enforcer.dev"


def create_of(name: str, cpu: str, annotations: dict[str, str]) -> ContainerCreate:
    """kubelet's CreateContainer for a one-container pod, through the CRI adapter."""
    uid = str(uuid.uuid5(uuid.NAMESPACE_URL, name))
    pod = manifest(name, sleeper(resources=guaranteed(cpu)), annotations=annotations)
    request = api_pb2.CreateContainerRequest(
        pod_sandbox_id=f"sandbox-{name}",
        config=container_config_for(
            pod, pod["spec"]["containers"][0], uid, memory_capacity=1 << 34
        ),
        sandbox_config=sandbox_config_for(pod, uid),
    )
    return container_create(request)


def run(e: Enforcer, name: str, cpu: str, annotations: dict[str, str]) -> tuple[str, str]:
    """Creates and starts a container; its id and cpuset."""
    key, pinning = e.create(
        create_of(name, cpu, annotations), sandbox_id=f"sandbox-{name}", resources=KubeletRecord()
    )
    runtime = e.runtime
    assert isinstance(runtime, StandInRuntime)
    cid = f"cid-{name}"
    runtime.add(cid, key)
    runtime.cpus[cid] = pinning.cpus
    e.created(key, cid)
    e.started(cid)
    return cid, pinning.cpus


def test_topology_aware_exclusive_cpus_take_the_annotations_class_while_held(
    tmp_path: Path,
) -> None:
    sysfs = make_sysfs(tmp_path / "sys")
    before = class_files(sysfs)
    e = start(tmp_path, sysfs, TOPOLOGY_AWARE)
    assert class_files(sysfs) == before  # nobody asked for a class yet
    fast, fast_cpus = run(e, "fast", "2", {f"{ANNOTATION}/container.app": "turbo"})
    _, slow_cpus = run(e, "slow", "1", {f"{ANNOTATION}/pod": "eco"})
    turbo, eco = CPUSet.parse(fast_cpus), CPUSet.parse(slow_cpus)
    assert len(turbo) == 2 and len(eco) == 1
    for cpu in MACHINE.cpus:
        want = "3800000" if cpu in turbo else "1200000" if cpu in eco else str(SCALING_MAX)
        assert read(sysfs, f"cpu{cpu}/cpufreq/scaling_max_freq") == want, cpu
        assert read(sysfs, f"cpu{cpu}/cpuidle/state3/disable") == ("1" if cpu in turbo else "0")
    # The container gone, its CPUs get back what they had; the other keeps its class.
    e.container_gone(fast, "exited")
    for cpu in turbo:
        assert read(sysfs, f"cpu{cpu}/cpufreq/scaling_max_freq") == str(SCALING_MAX)
        assert read(sysfs, f"cpu{cpu}/cpuidle/state3/disable") == "0"
    assert read(sysfs, f"cpu{min(eco)}/cpufreq/scaling_max_freq") == "1200000"
    e.shutdown()
    assert class_files(sysfs) == before


def test_a_class_on_a_container_without_exclusive_cpus_is_a_warning_not_a_write(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    sysfs = make_sysfs(tmp_path / "sys")
    before = class_files(sysfs)
    e = start(tmp_path, sysfs, TOPOLOGY_AWARE)
    with caplog.at_level(logging.WARNING):
        run(e, "web", "500m", {f"{ANNOTATION}/pod": "turbo"})
    assert class_files(sysfs) == before  # shared CPUs serve others: never set for one
    assert (
        "e2e/web container app: CPU class turbo is not applied: the container has no "
        "exclusive CPUs (it runs shared)" in caplog.text
    )


def test_an_unknown_or_malformed_class_is_refused_as_a_bad_request(tmp_path: Path) -> None:
    sysfs = make_sysfs(tmp_path / "sys")
    e = start(tmp_path, sysfs, TOPOLOGY_AWARE)
    with pytest.raises(Refusal) as info:
        run(e, "typo", "1", {f"{ANNOTATION}/container.app": "turob"})
    assert info.value.reason is Reason.BAD_REQUEST
    assert f'"{ANNOTATION}/container.app": CPU class "turob" is not configured' in str(info.value)
    assert "eco, turbo" in str(info.value)
    with pytest.raises(Refusal) as info:
        run(e, "bad", "1", {f"{ANNOTATION}/pod": "../../" + "x" * 5000})
    assert info.value.reason is Reason.BAD_REQUEST
    assert "is malformed" in str(info.value) and len(str(info.value)) < 400
    assert not e.policy.admitted  # nothing was taken


def test_a_namespace_classaccess_keeps_out_is_forbidden(tmp_path: Path) -> None:
    config = parse_config(
        {
            "policy": {"name": "topology-aware", "reservedCPUs": "0"},
            "cpuClasses": {"turbo": {"maxFreq": 3800000}},
            "classAccess": {"cpu": {"turbo": ["ai-*"]}},
        }
    )
    e = start(tmp_path, make_sysfs(tmp_path / "sys"), config)
    with pytest.raises(Refusal) as info:
        run(e, "x", "1", {f"{ANNOTATION}/pod": "turbo"})
    assert info.value.reason is Reason.FORBIDDEN
    assert 'namespace "e2e" may not use CPU class "turbo" (allowed namespaces: ai-*)' in str(
        info.value
    )


def test_status_and_metrics_show_which_cpus_are_in_which_class(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    e = start(tmp_path, make_sysfs(tmp_path / "sys"), TOPOLOGY_AWARE)
    _, fast_cpus = run(e, "fast", "2", {f"{ANNOTATION}/container.app": "turbo"})
    run(e, "web", "500m", {f"{ANNOTATION}/pod": "turbo"})  # shared: no class
    sample = e.metrics.registry.get_sample_value
    gauge = "resource_enforcer_cpu_class_cpus"
    assert sample(gauge, {"cpu_class": "turbo"}) == 2
    assert sample(gauge, {"cpu_class": "eco"}) == 0  # configured, no CPU in it

    # `status` reads the state file the engine wrote, as an operator would after the fact.
    assert status(str(tmp_path / "state"), "json") == 0
    document = json.loads(capsys.readouterr().out)
    assert document["cpuClasses"] == [{"name": "turbo", "cpus": fast_cpus}]
    by_pod = {c["pod"]: c for c in document["containers"]}
    assert by_pod["fast"]["cpuClass"] == "turbo" and by_pod["web"]["cpuClass"] is None
    assert status(str(tmp_path / "state")) == 0
    table = capsys.readouterr().out.splitlines()
    (at,) = [i for i, line in enumerate(table) if line.startswith("CPU-CLASS")]
    assert table[at + 1].split() == ["turbo", "2", fast_cpus]

    # A class the configuration drops loses its series; the CPUs leave it.
    e.reconfigure(
        parse_config(
            {
                "policy": {"name": "topology-aware", "reservedCPUs": "0"},
                "cpuClasses": {"eco": {"maxFreq": 1200000}},
            }
        )
    )
    assert sample(gauge, {"cpu_class": "turbo"}) is None
    assert sample(gauge, {"cpu_class": "eco"}) == 0


class WatchingStore(StateStore):
    """Records, at every save, what the sysfs showed and which originals the state held; it
    can refuse to save a state holding originals (as a full disk would)."""

    def __init__(self, path: Path, sysfs: Path) -> None:
        super().__init__(path)
        self.sysfs = sysfs
        self.saves: list[tuple[dict[str, str], dict[str, str]]] = []
        self.fail: OSError | None = None

    def save(self, data: dict, *, durable: bool = True, sync_later: bool = False) -> None:
        remembered = data.get("controllers", {}).get("cpuclass", {}).get("remembered", {})
        if self.fail is not None and remembered:
            raise self.fail
        self.saves.append((class_files(self.sysfs), dict(remembered)))
        super().save(data, durable=durable, sync_later=sync_later)


def test_the_originals_are_in_the_state_file_before_any_class_file_is_written(
    tmp_path: Path,
) -> None:
    """A crash right after a write must still leave the originals to the next process: the
    state holding them is saved first, and when it cannot be saved nothing is written."""
    sysfs = make_sysfs(tmp_path / "sys")
    before = class_files(sysfs)
    runtime = StandInRuntime()
    controllers = Controllers([CpusetController(runtime), CpuClasses(str(sysfs), MACHINE)])
    controllers.configure(CONFIG)
    store = WatchingStore(tmp_path / "state", sysfs)
    store.ensure_dir()
    e = Enforcer(
        topology=MACHINE, config=CONFIG, store=store, runtime=runtime, controllers=controllers
    )
    store.fail = OSError(28, "No space left on device")
    e.reconcile()
    assert class_files(sysfs) == before  # the originals could not be saved: nothing written
    store.fail = None
    e.repin()  # the next change of placements tries again
    (balloon,) = [b for b in e.policy.balloon_views() if b.type == "fast"]
    assert read(sysfs, f"cpu{min(balloon.cpus)}/cpufreq/scaling_max_freq") == "3800000"
    # The save that holds the originals saw the files still untouched.
    files, remembered = next((f, r) for f, r in store.saves if r)
    assert files == before
    for cpu in balloon.cpus:
        rel = f"devices/system/cpu/cpu{cpu}/cpufreq/scaling_max_freq"
        assert remembered[rel] == str(SCALING_MAX)
