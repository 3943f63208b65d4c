"""Every thread of a container ends in its RDT class: threads forked before their creator moved,
threads in the container's own sub-cgroups, threads that exit meanwhile; a container that forks
faster than it can be moved gets a clear error after a bounded number of rounds."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from enforcer.controllers.errors import ApplyError
from enforcer.controllers.rdt import ResctrlGroups
from enforcer.controllers.rdt.resctrl_groups import ASSIGN_ROUNDS
from resource_contract.class_config import RDTConfig
from tests.support.fake_cgroup import make_v1, make_v2
from tests.support.fake_resctrl import FakeResctrl, ResctrlShape

Make = Callable[..., FakeResctrl]
CONFIG = RDTConfig.model_validate(
    {"partitions": {"p": {"l3Allocation": "100%", "classes": {"gold": {}}}}}
)


def ids(path: Path) -> set[int]:
    return {int(t) for t in path.read_text().split()}


def add_threads(tasks_file: Path, *tids: int) -> None:
    with open(tasks_file, "a") as f:
        f.write("".join(f"{t}\n" for t in tids))


class Forking:
    """The fake kernel, with a container that forks while it is moved: when a thread is moved,
    the children it forked just before (listed in `forks`) appear in the cgroup, still in the
    old group, as the kernel leaves a child forked before its creator's move."""

    def __init__(self, fake: FakeResctrl, cgroup_tasks: Path, forks: dict[int, list[int]]) -> None:
        self.fake = fake
        self.cgroup_tasks = cgroup_tasks
        self.forks = forks
        self.moves: list[int] = []

    def mkdir(self, path: Path) -> None:
        self.fake.mkdir(path)

    def rmdir(self, path: Path) -> None:
        self.fake.rmdir(path)

    def write(self, path: Path, data: str) -> None:
        if path.name == "tasks":
            tid = int(data)
            self.moves.append(tid)
            children = self.forks.pop(tid, [])
            add_threads(self.cgroup_tasks, *children)
            add_threads(self.fake.root / "tasks", *children)  # the root group, as their creator
        self.fake.write(path, data)


def controller(fake: FakeResctrl, fs: object | None = None) -> ResctrlGroups:
    ctl = ResctrlGroups(fake.root, fs=fs or fake, mount_options=fake.mount_options)  # type: ignore[arg-type]
    ctl.configure(CONFIG)
    return ctl


def test_threads_forked_before_their_creator_moved_are_moved_too(
    fake_resctrl: Make, tmp_path: Path
) -> None:
    fake = fake_resctrl(ResctrlShape(tasks=(1, 100)))
    cg = make_v1(tmp_path / "cg", "/kubepods/pod1", "c1", threads=(100,))
    # The entrypoint (100) forks 101-104 at once; 102 forks 110 and 111 in turn.
    fs = Forking(fake, cg / "tasks", {100: [101, 102, 103, 104], 102: [110, 111]})
    ctl = controller(fake, fs)
    assert ctl.assign_cgroup("gold", cg)
    assert ids(cg / "tasks") == {100, 101, 102, 103, 104, 110, 111}
    assert ids(fake.root / "gold" / "tasks") == ids(cg / "tasks")
    assert ids(fake.root / "tasks") == {1}  # none left in the default class
    assert sorted(fs.moves) == [100, 101, 102, 103, 104, 110, 111]  # each moved once


def test_threads_in_the_containers_own_cgroups_are_moved(
    fake_resctrl: Make, tmp_path: Path
) -> None:
    fake = fake_resctrl()
    cg = make_v2(tmp_path / "cg", "/kubepods/pod1", "c1", threads=(200, 201))
    for sub, tids in (("init.scope", (202,)), ("app/worker", (203, 204))):
        (cg / sub).mkdir(parents=True)
        (cg / sub / "cgroup.threads").write_text("".join(f"{t}\n" for t in tids))
    ctl = controller(fake)
    assert ctl.assign_cgroup("gold", cg)
    assert ids(fake.root / "gold" / "tasks") == {200, 201, 202, 203, 204}


def test_threads_that_exit_are_skipped(fake_resctrl: Make, tmp_path: Path) -> None:
    fake = fake_resctrl()
    cg = make_v1(tmp_path / "cg", "/kubepods/pod1", "c1", threads=(300, 301, 302))
    fake.exited.add(301)

    class Exiting(Forking):
        def write(self, path: Path, data: str) -> None:
            super().write(path, data)
            if data.strip() == "300":  # 301 exits: the kernel drops it from the cgroup
                self.cgroup_tasks.write_text("300\n302\n")

    ctl = controller(fake, Exiting(fake, cg / "tasks", {}))
    assert ctl.assign_cgroup("gold", cg)
    assert ids(fake.root / "gold" / "tasks") == {300, 302}


def test_a_container_forking_without_end_gets_a_clear_error(
    fake_resctrl: Make, tmp_path: Path
) -> None:
    fake = fake_resctrl()
    cg = make_v1(tmp_path / "cg", "/kubepods/pod1", "c1", threads=(400,))
    # Every thread forks a new one just before it is moved: there is always one outside.
    forks = {400 + n: [401 + n] for n in range(1000)}
    fs = Forking(fake, cg / "tasks", forks)
    ctl = controller(fake, fs)
    with pytest.raises(ApplyError) as err:
        ctl.assign_cgroup("gold", cg)
    message = str(err.value)
    assert f'rdt class "gold": 1 thread(s) of the container in {cg}' in message
    assert f"after {ASSIGN_ROUNDS} rounds" in message
    assert f"(threads {400 + ASSIGN_ROUNDS})" in message
    assert len(fs.moves) == ASSIGN_ROUNDS  # bounded: one move per round here, then it stops
    # What could be moved was moved.
    assert ids(fake.root / "gold" / "tasks") == set(range(400, 400 + ASSIGN_ROUNDS))


def test_a_thread_moved_back_by_someone_else_is_moved_again(
    fake_resctrl: Make, tmp_path: Path
) -> None:
    fake = fake_resctrl()
    cg = make_v1(tmp_path / "cg", "/kubepods/pod1", "c1", threads=(500, 501))
    ctl = controller(fake)
    assert ctl.assign_cgroup("gold", cg)
    fake.write(fake.root / "tasks", "501\n")  # another tool puts it back in the default class
    assert ids(fake.root / "gold" / "tasks") == {500}
    assert ctl.assign_cgroup("gold", cg)
    assert ids(fake.root / "gold" / "tasks") == {500, 501}
