"""The fault suite's kubelet: pods started, retried and removed through the relay as kubelet
does it, including what kubelet does after a CreateContainer whose outcome it never learnt.

Built on tests.support.kubelet (which derives every CRI message as kubelet would), with the
answers' vocabulary (codes, retrying, reactions) in tests.faults.cri_calls. On top:

* calls the relay or the runtime cannot answer (UNAVAILABLE, cut off) are retried, as kubelet's
  next sync would, for up to `RETRY_SECONDS`;
* after an uncertain CreateContainer one of three reactions (`Reaction`): retry the same
  name and attempt and, when the runtime says the name is taken, find that container by
  listing the pod's containers and start it; or do what kubelet's `computePodActions` does,
  create the next attempt and garbage-collect the created one; or give up on the pod,
  removing whatever the runtime lists for it;
* a refused pod (RESOURCE_EXHAUSTED and other refusals) is removed, as a controller would
  delete a pod that cannot be placed;
* `relist` is kubelet's PLEG (an unfiltered ListContainers and ListPodSandbox, every second
  by `Relister`); `collect_garbage` is kubelet's container GC.
"""

from __future__ import annotations

import contextlib
import itertools
import shutil
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import grpc

from enforcer.cri import api_pb2
from tests.faults.cri_calls import (
    CALL_TIMEOUT,
    REFUSALS,
    RETRY_PAUSE,
    RETRY_SECONDS,
    UNCERTAIN,
    Code,
    Outcome,
    Reaction,
    retrying,
    transient,
)
from tests.faults.figures import KindFigures
from tests.faults.truth import FAST_RECONNECT
from tests.support.containerd import stuck_task
from tests.support.kubelet import KubeletEmulator, RunningPod, remove_pod_cgroups
from tests.support.kubelet_sends import BEST_EFFORT, BURSTABLE, GUARANTEED
from tests.support.pods import guaranteed, manifest, sleeper

NAMESPACE = "faults"
CONTAINER = "app"
RESOURCES: dict[str, dict[str, Any] | None] = {
    GUARANTEED: guaranteed("1", "32Mi"),
    BURSTABLE: {"requests": {"cpu": "100m", "memory": "16Mi"}, "limits": {"memory": "64Mi"}},
    BEST_EFFORT: None,
}
PREFIX = {GUARANTEED: "g", BURSTABLE: "b", BEST_EFFORT: "e"}


class Node:
    """The pods one kubelet wants on the node, driven through the relay."""

    def __init__(
        self,
        relay_socket: str,
        log_root: Path,
        figures: KindFigures,
        delete_task: Callable[[str], str | None] | None = None,
    ) -> None:
        self.kubelet = KubeletEmulator(
            relay_socket,
            log_root=log_root,
            timeout=CALL_TIMEOUT,
            channel_options=FAST_RECONNECT,
        )
        self.runtime = self.kubelet.runtime
        self.figures = figures
        # The operator's `ctr task rm -f` for containerd#11037's stuck tasks (see
        # `_remove_container`); None: such a container stays, reported as not removable.
        self.delete_task = delete_task
        self.pods: dict[str, RunningPod] = {}  # by pod name: the pods kubelet wants
        self.doomed: dict[str, RunningPod] = {}  # pods being removed, to retry
        self.sentinels: set[str] = set()  # pods that stay all along
        self._names = itertools.count()
        self._lock = threading.RLock()

    def close(self) -> None:
        self.kubelet.close(remove_pods=False)

    # -- pods -------------------------------------------------------------------------------

    def manifest_for(self, qos: str, prefix: str = "") -> dict[str, Any]:
        name = f"{prefix}{PREFIX[qos]}{next(self._names)}"
        pod = manifest(name, sleeper(CONTAINER, resources=RESOURCES[qos]), namespace=NAMESPACE)
        pod["metadata"]["uid"] = str(uuid.uuid4())  # kept across kubelet's retries
        return pod

    def of_qos(self, *qos: str) -> list[RunningPod]:
        with self._lock:
            return [p for p in self.pods.values() if p.qos in qos]

    def removable(self) -> list[RunningPod]:
        with self._lock:
            return [p for name, p in self.pods.items() if name not in self.sentinels]

    def run_sandbox(self, pod: dict[str, Any]) -> RunningPod | None:
        try:
            running = retrying(lambda: self.kubelet.run_pod_sandbox(pod))
        except grpc.RpcError:
            return None  # a sandbox that was made all the same goes at the next GC
        assert running is not None
        with self._lock:
            self.pods[running.name] = running
        return running

    def start_pod(self, pod: dict[str, Any], reaction: Reaction = Reaction.RETRY_SAME) -> Outcome:
        """Sandbox, container, start: the whole of kubelet's SyncPod for a one-container pod."""
        self.figures.tries += 1
        running = self.run_sandbox(pod)
        if running is None:
            return Outcome(None, Code.UNAVAILABLE, "RunPodSandbox kept failing")
        try:
            cid = self.create(running, 0)
        except grpc.RpcError as exc:
            return self.after_failed_create(running, 0, exc.code(), exc.details() or "", reaction)
        return self.start(running, cid)

    def create(self, pod: RunningPod, attempt: int, timeout: float | None = None) -> str:
        request = self.kubelet.create_request(pod, CONTAINER, attempt)
        answer = self.runtime.CreateContainer(request, timeout=timeout or CALL_TIMEOUT)
        with self._lock:
            pod.containers[CONTAINER] = answer.container_id
        return answer.container_id

    def create_cut_off(self, pod: RunningPod, attempt: int, mode: str, after: float) -> Code:
        """A CreateContainer that kubelet's client abandons after `after` seconds: by its
        deadline (`mode` "deadline", the grpc-timeout the relay passes on) or by cancelling the
        call (`mode` "cancel", the stream reset). OK when the answer came first."""
        request = self.kubelet.create_request(pod, CONTAINER, attempt)
        if mode == "deadline":
            try:
                answer = self.runtime.CreateContainer(request, timeout=after)
            except grpc.RpcError as exc:
                return exc.code()
        else:
            future = self.runtime.CreateContainer.future(request, timeout=CALL_TIMEOUT)
            time.sleep(after)
            future.cancel()
            try:
                answer = future.result()
            except grpc.FutureCancelledError:
                return Code.CANCELLED
            except grpc.RpcError as exc:
                return exc.code()
        with self._lock:
            pod.containers[CONTAINER] = answer.container_id
        return Code.OK

    def after_failed_create(
        self, pod: RunningPod, attempt: int, code: Code, details: str, reaction: Reaction
    ) -> Outcome:
        if code in REFUSALS:
            self.figures.refused += 1
            self.remove_pod(pod)
            return Outcome(None, code, details)
        if code not in UNCERTAIN or reaction is Reaction.GIVE_UP:
            self.remove_pod(pod)
            return Outcome(None, code, details)
        return self.recover(pod, attempt, reaction)

    def recover(self, pod: RunningPod, attempt: int, reaction: Reaction) -> Outcome:
        """kubelet's next syncs after a CreateContainer whose outcome it does not know."""
        if reaction is Reaction.GIVE_UP:
            self.remove_pod(pod)
            return Outcome(None, Code.CANCELLED, "kubelet gave up on the pod")
        deadline = time.monotonic() + RETRY_SECONDS
        last = "no answer"
        while time.monotonic() < deadline:
            try:
                found = self.containers_of(pod)
            except grpc.RpcError as exc:
                last = f"ListContainers: {exc.code().name}: {exc.details()}"
                time.sleep(RETRY_PAUSE)
                continue
            if reaction is Reaction.RETRY_SAME:
                same = [c for c in found if c.metadata.attempt == attempt]
                alive = (api_pb2.CONTAINER_CREATED, api_pb2.CONTAINER_RUNNING)
                if same and same[0].state in alive:
                    # The runtime made it after all: kubelet takes it as its own and starts it.
                    with self._lock:
                        pod.containers[CONTAINER] = same[0].id
                    if same[0].state == api_pb2.CONTAINER_RUNNING:
                        return Outcome(pod)
                    return self.start(pod, same[0].id)
                for dead in same:  # its name must be free again for the retry
                    self._remove_container(dead.id)
                next_attempt = attempt
            else:
                next_attempt = max((c.metadata.attempt for c in found), default=attempt - 1) + 1
            try:
                cid = self.create(pod, next_attempt)
            except grpc.RpcError as exc:
                if exc.code() in REFUSALS:
                    self.figures.refused += 1
                    self.remove_pod(pod)
                    return Outcome(None, exc.code(), exc.details() or "")
                # Cut off again, or the name is still reserved by a creation under way.
                last = f"CreateContainer: {exc.code().name}: {exc.details()}"
                time.sleep(RETRY_PAUSE)
                continue
            outcome = self.start(pod, cid)
            if outcome.started and reaction is Reaction.RETRY_NEXT:
                for old in found:  # kubelet's GC of the attempts that never ran
                    if old.id != cid and old.state != api_pb2.CONTAINER_RUNNING:
                        self._remove_container(old.id)
            return outcome
        self.remove_pod(pod)
        return Outcome(None, Code.DEADLINE_EXCEEDED, f"kubelet's retries ran out: {last}")

    def start(self, pod: RunningPod, container_id: str) -> Outcome:
        """StartContainer until the runtime says the container runs (kubelet goes by the
        container's status after a failed start: a start cut off by a restart may have
        happened, and its repetition then answers ALREADY_EXISTS)."""
        deadline = time.monotonic() + RETRY_SECONDS
        while True:
            try:
                self.runtime.StartContainer(
                    api_pb2.StartContainerRequest(container_id=container_id), timeout=CALL_TIMEOUT
                )
                return Outcome(pod)
            except grpc.RpcError as exc:
                code, details, again = exc.code(), exc.details() or "", transient(exc)
            state = None
            with contextlib.suppress(grpc.RpcError):
                state = self.kubelet.container_status(container_id).state
            if state == api_pb2.CONTAINER_RUNNING:
                return Outcome(pod)
            waiting = state in (None, api_pb2.CONTAINER_CREATED)
            if again and waiting and time.monotonic() < deadline:
                time.sleep(RETRY_PAUSE)
                continue
            break
        if code in REFUSALS:
            self.figures.refused += 1
        self.remove_pod(pod)
        return Outcome(None, code, f"StartContainer: {details}")

    def stop_once(self, pod: RunningPod) -> str | None:
        """One StopContainer of the pod's container, not retried (None when it passed); the pod
        is then removed by `catch_up`."""
        with self._lock:
            self.pods.pop(pod.name, None)
            self.doomed[pod.name] = pod
        cid = pod.containers.get(CONTAINER)
        if cid is None:
            return None
        try:
            self.runtime.StopContainer(
                api_pb2.StopContainerRequest(container_id=cid, timeout=0),
                timeout=CALL_TIMEOUT,
                wait_for_ready=True,  # as in `answers`: not a refusal, a reconnect
            )
        except grpc.RpcError as exc:
            return f"{exc.code().name}: {exc.details()}"
        return None

    def start_created(self, container_id: str) -> Code:
        """StartContainer of a created container, once (the races' starter)."""
        try:
            self.runtime.StartContainer(
                api_pb2.StartContainerRequest(container_id=container_id), timeout=CALL_TIMEOUT
            )
        except grpc.RpcError as exc:
            return exc.code()
        return Code.OK

    # -- removal ----------------------------------------------------------------------------

    def containers_of(self, pod: RunningPod) -> list[api_pb2.Container]:
        """The pod's containers as the runtime lists them (kubelet's GetPodStatus)."""
        request = api_pb2.ListContainersRequest(
            filter=api_pb2.ContainerFilter(label_selector={"io.kubernetes.pod.uid": pod.uid})
        )
        answer = retrying(lambda: self.runtime.ListContainers(request, timeout=CALL_TIMEOUT))
        assert answer is not None
        return list(answer.containers)

    def _remove_container(self, container_id: str) -> None:
        retrying(
            lambda: self.runtime.StopContainer(
                api_pb2.StopContainerRequest(container_id=container_id, timeout=0),
                timeout=CALL_TIMEOUT,
            ),
            gone_ok=True,
        )
        remove = api_pb2.RemoveContainerRequest(container_id=container_id)
        try:
            retrying(
                lambda: self.runtime.RemoveContainer(remove, timeout=CALL_TIMEOUT), gone_ok=True
            )
        except grpc.RpcError as exc:
            if not self._stuck_task_deleted(container_id, exc):
                raise
            retrying(
                lambda: self.runtime.RemoveContainer(remove, timeout=CALL_TIMEOUT), gone_ok=True
            )

    def _stuck_task_deleted(self, container_id: str, exc: grpc.RpcError) -> bool:
        """containerd#11037 (`stuck_task`; here: the relay killed during a StartContainer):
        CRI can neither stop nor remove the container, on a real node too. True when it was
        that and the task is now deleted, as an operator would with `ctr task rm -f`; anything
        else is left to the caller."""
        if self.delete_task is None or exc.code() != Code.FAILED_PRECONDITION:
            return False
        if "running task" not in (exc.details() or ""):
            return False
        answer = retrying(
            lambda: self.runtime.ContainerStatus(
                api_pb2.ContainerStatusRequest(container_id=container_id), timeout=CALL_TIMEOUT
            )
        )
        assert answer is not None
        if not stuck_task(answer.status, exc.details() or ""):
            return False
        if self.delete_task(container_id) is not None:
            return False
        self.figures.stuck_tasks += 1
        return True

    def _remove_sandbox(self, sandbox_id: str) -> None:
        retrying(
            lambda: self.runtime.StopPodSandbox(
                api_pb2.StopPodSandboxRequest(pod_sandbox_id=sandbox_id), timeout=CALL_TIMEOUT
            ),
            gone_ok=True,
        )
        retrying(
            lambda: self.runtime.RemovePodSandbox(
                api_pb2.RemovePodSandboxRequest(pod_sandbox_id=sandbox_id), timeout=CALL_TIMEOUT
            ),
            gone_ok=True,
        )

    def remove_pod(self, pod: RunningPod) -> str | None:
        """kubelet's killPod and removal: every container the runtime lists for the pod, then
        its sandbox. None when done, else why not (the pod is kept to retry)."""
        with self._lock:
            self.pods.pop(pod.name, None)
            self.doomed[pod.name] = pod
        try:
            for c in self.containers_of(pod):
                self._remove_container(c.id)
            self._remove_sandbox(pod.sandbox_id)
        except grpc.RpcError as exc:
            return f"{exc.code().name}: {exc.details()}"
        with self._lock:
            self.doomed.pop(pod.name, None)
            self.kubelet.pods.pop(pod.sandbox_id, None)
        remove_pod_cgroups(pod.cgroup_parent)
        shutil.rmtree(pod.sandbox_config.log_directory, ignore_errors=True)
        return None

    def remove_all(self, *qos: str) -> list[str]:
        """Removes the (non-sentinel) pods of these QoS classes; the reasons of those that
        could not be removed."""
        return [
            f"{p.namespace}/{p.name}: {why}"
            for p in self.removable()
            if p.qos in qos and (why := self.remove_pod(p)) is not None
        ]

    def catch_up(self) -> list[str]:
        """The removals that failed before, again, then kubelet's GC."""
        problems = []
        with self._lock:
            doomed = list(self.doomed.values())
        for pod in doomed:
            why = self.remove_pod(pod)
            if why is not None:
                problems.append(f"{pod.namespace}/{pod.name}: {why}")
        try:
            self.collect_garbage()
        except grpc.RpcError as exc:
            problems.append(f"garbage collection: {exc.code().name}: {exc.details()}")
        return problems

    def collect_garbage(self) -> None:
        """kubelet's container GC: containers and sandboxes of pods it does not want, and
        attempts of wanted pods that are neither the current one nor running."""
        with self._lock:
            wanted = {p.sandbox_id for p in self.pods.values()}
            current = {cid for p in self.pods.values() for cid in p.containers.values()}
        listed = retrying(
            lambda: self.runtime.ListContainers(
                api_pb2.ListContainersRequest(filter=api_pb2.ContainerFilter()),
                timeout=CALL_TIMEOUT,
            )
        )
        assert listed is not None
        for c in listed.containers:
            if c.pod_sandbox_id not in wanted or (
                c.id not in current and c.state != api_pb2.CONTAINER_RUNNING
            ):
                self._remove_container(c.id)
        sandboxes = retrying(
            lambda: self.runtime.ListPodSandbox(
                api_pb2.ListPodSandboxRequest(), timeout=CALL_TIMEOUT
            )
        )
        assert sandboxes is not None
        for s in sandboxes.items:
            if s.id not in wanted:
                self._remove_sandbox(s.id)

    def relist(self) -> None:
        """kubelet's PLEG relisting: every container and sandbox, no filter."""
        self.runtime.ListContainers(
            api_pb2.ListContainersRequest(filter=api_pb2.ContainerFilter()), timeout=CALL_TIMEOUT
        )
        self.runtime.ListPodSandbox(api_pb2.ListPodSandboxRequest(), timeout=CALL_TIMEOUT)

    def answers(self) -> str | None:
        """None when the relay answers a read call (Version, ListContainers), else why not."""
        try:
            # Waits for the connection (bounded by the deadline): right after a restart the
            # channel may still be backing off from the moments no enforcer listened, and
            # kubelet's next sync would simply try again.
            self.runtime.Version(
                api_pb2.VersionRequest(version="v1"), timeout=5, wait_for_ready=True
            )
            self.relist()
        except grpc.RpcError as exc:
            return f"{exc.code().name}: {exc.details()}"
        return None


class Relister:
    """kubelet's PLEG in the background: `Node.relist` every second, errors ignored."""

    def __init__(self, node: Node, every: float = 1.0) -> None:
        self.node = node
        self.every = every
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="pleg", daemon=True)

    def start(self) -> Relister:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(10)

    def _run(self) -> None:
        while not self._stop.wait(self.every):
            with contextlib.suppress(grpc.RpcError):
                self.node.relist()
