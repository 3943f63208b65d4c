"""The relay's ListContainers tap: what kubelet's relistings show reaches the engine, judged
against the registry as it was when the listing was asked for; a burst of complete listings
is judged once, by the newest."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path

from enforcer.cri import api_pb2
from enforcer.engine import Enforcer
from enforcer.relay.h2 import Response
from enforcer.relay.service import LISTING_COALESCE_SECONDS, CRIService
from enforcer.worker import EngineWorker
from tests.engine.standins import StandInRuntime, admit, create, enforcer
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


def only_of(cid: str) -> bytes:
    """A filter naming one container, as kubelet's per-pod listings carry one."""
    return api_pb2.ListContainersRequest(filter=api_pb2.ContainerFilter(id=cid)).SerializeToString()


def answered(message: bytes) -> Response:
    return Response(status=0, details="", message=message)


async def settled(service: CRIService) -> None:
    """Once the coalesced listing is judged and the engine's work for it is done."""
    await asyncio.sleep(LISTING_COALESCE_SECONDS * 1.5)
    await service.worker.run(lambda: None)  # the one worker runs in order


def on_service(
    tmp_path: Path, body: Callable[[Enforcer, StandInRuntime, CRIService], Awaitable[None]]
) -> None:
    runtime = StandInRuntime()
    e = enforcer(tmp_path, runtime)
    service = CRIService(EngineWorker(e))
    try:
        asyncio.run(body(e, runtime, service))
    finally:
        service.worker.close()


def held(e: Enforcer) -> set[str | None]:
    return {t.container_id for t in e.registry.entries.values()}


def test_a_relisting_releases_what_exited_and_keeps_the_rest(tmp_path: Path) -> None:
    async def body(e: Enforcer, runtime: StandInRuntime, service: CRIService) -> None:
        first = create(e, runtime, "first", guaranteed("1"))
        second = create(e, runtime, "second", guaranteed("1"))
        for _ in range(3):  # as kubelet relists
            service.list_containers_tap()(EVERYTHING, answered(listing(e, first, second)))
            await settled(service)
        assert held(e) == {first, second}
        service.list_containers_tap()(EVERYTHING, answered(listing(e, first, exited=(second,))))
        await settled(service)
        assert held(e) == {first}
        assert len(e.policy.taken) == 1

    on_service(tmp_path, body)


def test_a_burst_of_listings_is_judged_by_the_newest(tmp_path: Path) -> None:
    async def body(e: Enforcer, runtime: StandInRuntime, service: CRIService) -> None:
        first = create(e, runtime, "first", guaranteed("1"))
        second = create(e, runtime, "second", guaranteed("1"))
        # Within one burst: the older answer shows `first` exited, the newest shows it
        # running again (it is what the runtime says now): nothing is released.
        service.list_containers_tap()(EVERYTHING, answered(listing(e, second, exited=(first,))))
        service.list_containers_tap()(EVERYTHING, answered(listing(e, first, second)))
        await settled(service)
        assert held(e) == {first, second}
        # The other way round: the newest shows `second` exited; it is released.
        service.list_containers_tap()(EVERYTHING, answered(listing(e, first, second)))
        service.list_containers_tap()(EVERYTHING, answered(listing(e, first, exited=(second,))))
        await settled(service)
        assert held(e) == {first}

    on_service(tmp_path, body)


def test_a_filtered_listing_is_judged_at_once(tmp_path: Path) -> None:
    async def body(e: Enforcer, runtime: StandInRuntime, service: CRIService) -> None:
        first = create(e, runtime, "first", guaranteed("1"))
        second = create(e, runtime, "second", guaranteed("1"))
        # A listing narrowed to one container shows it exited; the other, not listed, stays.
        service.list_containers_tap()(only_of(second), answered(listing(e, exited=(second,))))
        await service.worker.run(lambda: None)  # no coalescing wait: the worker has it already
        assert held(e) == {first}

    on_service(tmp_path, body)


def test_only_a_listing_asked_for_after_the_binding_proves_a_container_gone(
    tmp_path: Path,
) -> None:
    """A listing asked for before a container was bound cannot prove it gone; the same answer
    to a listing asked for after the binding can."""

    async def body(e: Enforcer, runtime: StandInRuntime, service: CRIService) -> None:
        kept = create(e, runtime, "kept")
        before = listing(e, kept)
        tap = service.list_containers_tap()  # asked before the next container is bound
        key, _ = admit(e, "vanishing", guaranteed("1"))
        e.created(key, "cid-vanishing")
        tap(EVERYTHING, answered(before))
        await settled(service)
        assert key in e.registry  # bound after the listing was asked for: not proof
        service.list_containers_tap()(EVERYTHING, answered(before))  # asked after the binding
        await settled(service)
        assert key not in e.registry
        assert not e.policy.taken

    on_service(tmp_path, body)
