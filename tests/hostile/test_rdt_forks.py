"""A container whose entrypoint forks several children at once: every one of its processes ends in
its RDT class. The enforcer (console script) in front of a real containerd 1.6 and runc; resctrl
faked in a folder laid out as the kernel's (this machine has no RDT).

The children are all forked before the enforcer can move anything: the runc that containerd
calls (tests/support/held_runc.py, the real runc behind it) holds `runc start`, and so
StartContainer, until the container's cgroup lists them all. The kernel leaves a child forked
before its creator's move in the old group, so each of them must be moved on its own: moving
the first process is not enough.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.hostile.conftest import Measured
from tests.support.containerd import ContainerdError, PrivateContainerd, containerd_available
from tests.support.enforcer_process import EnforcerProcess
from tests.support.fake_resctrl import FakeResctrl, ResctrlShape
from tests.support.held_runc import ENV, install
from tests.support.images import BUSYBOX_IMAGE
from tests.support.kubelet import KubeletEmulator
from tests.support.pods import manifest

pytestmark = pytest.mark.containerd

CHILDREN = 8
CONFIG = """\
policy: {name: static, reservedCPUs: "0"}
rdt:
  partitions:
    shared:
      l3Allocation: "100%"
      classes:
        gold: {l3Allocation: "60%"}
"""


@pytest.fixture(scope="module")
def held_containerd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PrivateContainerd]:
    """A private containerd whose runc holds `start` until the container has forked."""
    reason = containerd_available()
    if reason:
        pytest.fail(f"a real containerd is needed: {reason}", pytrace=False)
    ctrd = PrivateContainerd(runc_binary=install(tmp_path_factory.mktemp("runc")))
    try:
        ctrd.start()
    except ContainerdError as exc:
        ctrd.close()
        pytest.fail(f"private containerd did not start: {exc}", pytrace=False)
    try:
        yield ctrd
    finally:
        ctrd.close()


def forking(name: str = "app") -> dict:
    script = f"for i in $(seq {CHILDREN}); do sleep 3600 & done; wait"
    return {
        "name": name,
        "image": BUSYBOX_IMAGE,
        "command": ["sh", "-c", script],
        # `runc start` returns once the shell and all its children are in the cgroup.
        "env": [{"name": ENV, "value": str(CHILDREN + 1)}],
    }


def ids(path: Path | str) -> set[int]:
    return {int(t) for t in Path(path).read_text().split()}


def test_every_child_forked_at_start_is_in_the_rdt_class(
    held_containerd: PrivateContainerd, tmp_path: Path, measured: Measured
) -> None:
    resctrl = FakeResctrl(tmp_path / "resctrl", ResctrlShape())
    config = tmp_path / "config.yaml"
    config.write_text(CONFIG)
    proc = EnforcerProcess(
        tmp_path / "enforcer",
        runtime_socket=held_containerd.socket,
        config=str(config),
        extra_args=["--resctrl-root", str(resctrl.root)],
    )
    proc.start()
    try:
        with KubeletEmulator(proc.relay_socket, log_root=tmp_path / "pods") as kubelet:
            pod = kubelet.run_pod(
                manifest(
                    "forks", forking(), annotations={"rdtclass.resource-enforcer.dev/pod": "gold"}
                )
            )
            # The truth of the container: its real cgroup, read after the enforcer answered.
            cgroup = ids(Path(pod.cgroup_path("cpuset", "app"), "tasks"))
            assert len(cgroup) == CHILDREN + 1, "runc start was not held"
            group = ids(resctrl.root / "gold" / "tasks")
            assert cgroup <= group, f"left outside the class: {sorted(cgroup - group)}"
            # Nothing of the container is written to the default class.
            assert not cgroup & ids(resctrl.root / "tasks")
            measured(
                f"a container whose entrypoint forks {CHILDREN} children before the enforcer "
                "moves it into its RDT class",
                "every thread of its cgroup in the class's tasks",
                f"{len(cgroup & group)} of {len(cgroup)} threads in the class",
            )
            # A pod without the annotation (held the same way) stays in the default class.
            plain = kubelet.run_pod(manifest("plain", forking()))
            others = ids(Path(plain.cgroup_path("cpuset", "app"), "tasks"))
            assert len(others) == CHILDREN + 1
            assert not others & ids(resctrl.root / "gold" / "tasks")
    finally:
        assert proc.stop() == 0, proc.log_tail()
