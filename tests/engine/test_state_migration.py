"""A state folder written while the registry kept CRI's JSON as its record of kubelet's resources
(tests/engine/data/state-cri-record, made by the code of 1d1b4f9) is read into the neutral
record: the containers are kept where they were, a re-pin sends the runtime the same
UpdateContainerResources as the old code did, and the next write saves the neutral form."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from google.protobuf import json_format

from enforcer.configuration import parse_config
from enforcer.cri.convert import record_of, update_request
from enforcer.engine import Enforcer, KubeletRecord, LiveContainer, Pinning, Recorded
from enforcer.state import StateStore
from enforcer.topology import Topology

DATA = Path(__file__).parent / "data"
MACHINE = Topology.synthetic(sockets=1, cores_per_node=4, threads_per_core=1)  # CPUs 0-3
CONFIG = parse_config({"policy": {"name": "static", "reservedCPUs": "0"}})
# What the old code had applied when it saved the folder.
APPLIED = {"cid-first": "1", "cid-second": "2", "cid-third": "0,3"}


class CriRuntime:
    """The three containers run; a re-pin is converted as the CRI client converts it, and the
    requests are kept (as JSON, to compare with what the old code sent)."""

    def __init__(self) -> None:
        self.containers = {
            cid: LiveContainer(cid, f"sandbox-{cid[4:]}", None, running=True, exited=False)
            for cid in APPLIED
        }
        self.sent: dict[str, dict] = {}

    def list_containers(self) -> list[LiveContainer]:
        return list(self.containers.values())

    def repin(self, container_id: str, resources: KubeletRecord, pinning: Pinning) -> KubeletRecord:
        request = update_request(container_id, resources, pinning)
        self.sent[container_id] = json_format.MessageToDict(
            request, preserving_proto_field_name=True
        )
        return record_of(request.linux)

    def recorded(self, container: LiveContainer) -> Recorded | None:
        return None


def load(folder: Path, runtime: CriRuntime) -> Enforcer:
    e = Enforcer(topology=MACHINE, config=CONFIG, store=StateStore(folder), runtime=runtime)
    e.restore_saved()
    e.reconcile()
    return e


def test_an_old_state_folder_keeps_its_containers_and_repins_them_as_before(
    tmp_path: Path,
) -> None:
    folder = tmp_path / "state"
    shutil.copytree(DATA / "state-cri-record", folder)
    expected = json.loads((DATA / "state-cri-record.updates.json").read_text())
    runtime = CriRuntime()
    e = load(folder, runtime)

    entries = {entry.container_id: entry for entry in e.registry.entries.values()}
    assert {cid: entry.applied_cpus for cid, entry in entries.items()} == APPLIED
    first = entries["cid-first"].resources
    assert first.damage is None
    assert first.hugepage_limits == (("2MB", 4194304),)
    assert first.unified == (("memory.oom.group", "1"),)
    assert (first.memory_limit, first.memory_swap_limit, first.oom_score_adj) == (
        64 << 20,
        64 << 20,
        -997,
    )
    # The re-pin each container gets is byte for byte the one the old code sent.
    for cid, entry in entries.items():
        pinning = Pinning(entry.applied_cpus or "", entry.applied_mems or "")
        request = update_request(cid, entry.resources, pinning)
        assert json_format.MessageToDict(request, preserving_proto_field_name=True) == expected[cid]

    e.persist()
    saved = json.loads((folder / "state.json").read_text())
    for container in saved["containers"]:
        record = container["resources"]
        assert "memory_limit_in_bytes" not in record  # written in the neutral form
        assert all(not isinstance(v, str) or k.startswith("cpuset") for k, v in record.items())

    again = load(folder, CriRuntime())
    assert {
        entry.container_id: (entry.applied_cpus, entry.resources)
        for entry in again.registry.entries.values()
    } == {cid: (entry.applied_cpus, entry.resources) for cid, entry in entries.items()}


def test_a_record_saved_in_either_form_reads_the_same() -> None:
    old = {
        "cpu_period": "100000",
        "cpu_quota": "150000",
        "cpu_shares": "1536",
        "memory_limit_in_bytes": "67108864",
        "memory_swap_limit_in_bytes": "67108864",
        "oom_score_adj": "-997",
        "cpuset_cpus": "1-2",
        "hugepage_limits": [{"page_size": "2MB", "limit": "4194304"}, {"page_size": "1GB"}],
        "unified": {"memory.high": "max"},
    }
    record = KubeletRecord.from_saved(old)
    assert record.damage is None
    assert KubeletRecord.from_saved(record.to_dict()) == record
    assert record.hugepage_limits == (("2MB", 4194304), ("1GB", 0))
    assert (record.cpu_quota, record.memory_limit, record.cpuset_cpus) == (150000, 64 << 20, "1-2")


def test_a_damaged_record_names_its_field_and_is_kept_as_saved() -> None:
    for saved, field in (
        ({"cpu_shares": [1]}, "cpu_shares"),
        ({"memory_limit_in_bytes": "lots"}, "memory_limit_in_bytes"),
        ({"cpu_quota": str(1 << 70)}, "cpu_quota"),
        ({"hugepage_limits": [{"page_size": 2}]}, "hugepage_limits.page_size"),
        ({"unified": {"memory.max": 5}}, "unified.memory.max"),
        ({"cpu_sharez": "2"}, "cpu_sharez"),
    ):
        record = KubeletRecord.from_saved(saved)
        assert record.damage is not None and repr(field) in record.damage, (saved, record.damage)
        assert record.to_dict() == saved
    assert KubeletRecord.from_saved([1]).damage == "the record is list, not an object"
