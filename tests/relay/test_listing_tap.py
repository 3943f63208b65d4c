"""The relay's ListContainers tap: what kubelet's relistings show reaches the engine, judged
against the registry as it is when the listing was asked for."""

from __future__ import annotations

from pathlib import Path

from enforcer.cri import api_pb2
from enforcer.engine import Enforcer
from enforcer.relay.h2 import Response
from enforcer.relay.service import CRIService
from tests.engine.test_engine_core import StandInRuntime, admit, create, enforcer
from tests.support.pods import guaranteed

EVERYTHING = api_pb2.ListContainersRequest().SerializeToString()  # kubelet's relisting


def listing(e: Enforcer, *running: str, exited: tuple[str, ...] = ()) -> bytes:
    """The runtime's answer showing these registered containers (by container id)."""
    answer = api_pb2.ListContainersResponse()
    for cid in (*running, *exited):
        entry = e.registry.by_container(cid)
        assert entry is not None
        uid, name = entry.key.split("/")
        c = answer.containers.add(id=cid, pod_sandbox_id=entry.sandbox_id)
        c.metadata.name = name
        c.labels["io.kubernetes.pod.uid"] = uid
        c.state = api_pb2.CONTAINER_EXITED if cid in exited else api_pb2.CONTAINER_RUNNING
    return answer.SerializeToString()


def relist(service: CRIService, answer: bytes) -> None:
    """One relisting through the tap, its engine work done before this returns."""
    service.list_containers_tap()(EVERYTHING, Response(status=0, details="", message=answer))
    service.run_pending()


class Service(CRIService):
    def run_pending(self) -> None:
        self._worker.submit(lambda: None).result(timeout=10)  # the one worker runs in order


def test_a_relisting_releases_what_exited_and_keeps_the_rest(tmp_path: Path) -> None:
    runtime = StandInRuntime()
    e = enforcer(tmp_path, runtime)
    service = Service(e)
    try:
        first = create(e, runtime, "first", guaranteed("1"))
        second = create(e, runtime, "second", guaranteed("1"))
        both = listing(e, first, second)
        for _ in range(3):  # as kubelet relists, every second
            relist(service, both)
        assert {t.container_id for t in e.registry.entries.values()} == {first, second}
        relist(service, listing(e, first, exited=(second,)))
        assert {t.container_id for t in e.registry.entries.values()} == {first}
        assert len(e.policy.taken) == 1
    finally:
        service.close()


def test_only_a_listing_asked_for_after_the_binding_proves_a_container_gone(tmp_path: Path) -> None:
    """A listing asked for before a container was bound cannot prove it gone; the same answer
    to a listing asked for after the binding can."""
    runtime = StandInRuntime()
    e = enforcer(tmp_path, runtime)
    service = Service(e)
    try:
        kept = create(e, runtime, "kept")
        before = listing(e, kept)
        tap = service.list_containers_tap()  # asked before the next container is bound
        key, _ = admit(e, "vanishing", guaranteed("1"))
        e.created(key, "cid-vanishing")
        tap(EVERYTHING, Response(status=0, details="", message=before))
        service.run_pending()
        assert key in e.registry  # bound after the listing was asked for: not proof
        relist(service, before)  # the same bytes, asked for after the binding
        assert key not in e.registry
        assert not e.policy.taken
    finally:
        service.close()
