"""The fault suite's kubelet removes containerd#11037's stuck tasks, and only those.

containerd 1.6 leaves a task behind a StartContainer that is cut off while it makes the task
(the relay killed mid-call): CRI reports the container exited with reason StartError, yet
cannot remove it ("cannot delete running task"). The suite's kubelet deletes such a task as an
operator would (`ctr task rm -f`) and counts it; any other container that cannot be removed
stays a failure. The race itself is too narrow to hit on purpose, so these tests make the
same state in a way that always works: the task made and started with ctr behind CRI's back,
then CRI's StartContainer fails on it ("already exists") and marks the container StartError.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from enforcer.cri import api_pb2, api_pb2_grpc
from tests.faults.figures import KindFigures
from tests.faults.node import Node
from tests.support.containerd import PrivateContainerd
from tests.support.kubelet import RunningPod
from tests.support.kubelet_sends import BURSTABLE


def task_status(containerd: PrivateContainerd, container_id: str) -> str | None:
    """The containerd task's status as `ctr task ls` prints it (None: no task)."""
    listed = containerd.ctr("task", "ls")
    assert listed.returncode == 0, listed.stderr
    for line in listed.stdout.splitlines():
        fields = line.split()
        if fields and fields[0] == container_id:
            return fields[-1]
    return None


def task_behind_cri(containerd: PrivateContainerd, container_id: str) -> None:
    """Makes and starts the container's task with ctr, behind CRI's back."""
    started = containerd.ctr("task", "start", "--detach", "--null-io", container_id)
    assert started.returncode == 0, started.stderr
    assert task_status(containerd, container_id) == "RUNNING"


@pytest.fixture
def node(containerd: PrivateContainerd, tmp_path: Path) -> Iterator[Node]:
    containerd.remove_all_pods()
    figures = KindFigures("stuck", 0)
    made = Node(containerd.socket, tmp_path / "pods", figures, containerd.delete_task)
    yield made
    made.close()
    containerd.remove_all_pods()


def created_pod(node: Node) -> tuple[RunningPod, str]:
    pod = node.run_sandbox(node.manifest_for(BURSTABLE))
    assert pod is not None
    return pod, node.create(pod, 0)


def listed(containerd: PrivateContainerd) -> set[str]:
    with containerd.channel() as channel:
        stub = api_pb2_grpc.RuntimeServiceStub(channel)
        answer = stub.ListContainers(api_pb2.ListContainersRequest(), timeout=30)
    return {c.id for c in answer.containers}


def stuck_pod(containerd: PrivateContainerd, node: Node) -> tuple[RunningPod, str]:
    """A pod whose container is in containerd#11037's state: exited, StartError, a task."""
    pod, cid = created_pod(node)
    task_behind_cri(containerd, cid)
    with pytest.raises(grpc.RpcError):
        node.runtime.StartContainer(api_pb2.StartContainerRequest(container_id=cid), timeout=30)
    status = node.runtime.ContainerStatus(api_pb2.ContainerStatusRequest(container_id=cid))
    assert (status.status.state, status.status.reason) == (api_pb2.CONTAINER_EXITED, "StartError")
    return pod, cid


def test_a_start_error_with_a_task_left_is_removed_and_counted(
    containerd: PrivateContainerd, node: Node
) -> None:
    pod, cid = stuck_pod(containerd, node)

    assert node.remove_pod(pod) is None
    assert node.figures.stuck_tasks == 1
    assert cid not in listed(containerd)
    assert task_status(containerd, cid) is None


def test_any_other_container_that_cannot_go_stays_a_failure(
    containerd: PrivateContainerd, node: Node
) -> None:
    """A task CRI knows nothing of, on a container CRI still calls created, is not the
    containerd bug: the suite's kubelet does not touch it, it reports it."""
    pod, cid = created_pod(node)
    task_behind_cri(containerd, cid)

    why = node.remove_pod(pod)
    assert why is not None and "running task" in why, why
    assert node.figures.stuck_tasks == 0
    assert cid in listed(containerd) and task_status(containerd, cid) == "RUNNING"
    assert pod.name in node.doomed  # kept, to retry

    # The cleanup between tests frees it all the same, and names it apart from the bug's.
    left = containerd.remove_all_pods()
    assert (left.stuck, left.other) == ([], [cid])
    assert cid not in listed(containerd)
    assert task_status(containerd, cid) is None


def test_the_cleanup_between_tests_counts_the_bugs_stuck_tasks_as_such(
    containerd: PrivateContainerd, node: Node
) -> None:
    _, cid = stuck_pod(containerd, node)

    left = containerd.remove_all_pods()
    assert (left.stuck, left.other) == ([cid], [])
    assert cid not in listed(containerd)
    assert task_status(containerd, cid) is None
