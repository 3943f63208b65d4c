"""The relay's RunPodSandbox: the beta-dialect class annotations, which the enforcer takes over,
are hidden from a runtime that reads them from the sandbox (CRI-O), and left in the sandbox of
containerd, which reads them from CreateContainer only and keeps the config a lost state is
rebuilt from."""

from __future__ import annotations

import asyncio
from pathlib import Path

import grpc

from enforcer.cri import api_pb2
from enforcer.relay.h2 import AnswerHere, Call, Forward, Response
from enforcer.relay.service import RUNTIME, CRIService
from enforcer.worker import EngineWorker
from tests.engine.standins import StandInRuntime, enforcer

CLASSES = {
    "rdt.resources.beta.kubernetes.io/pod": "gold",
    "blockio.resources.beta.kubernetes.io/container.app": "throttled",
}
OTHERS = {"rdtclass.resource-enforcer.dev/pod": "silver", "team": "a"}


def sandbox(annotations: dict[str, str]) -> Call:
    request = api_pb2.RunPodSandboxRequest()
    request.config.metadata.name = "p"
    request.config.annotations.update(annotations)
    return Call(RUNTIME + "RunPodSandbox", [], request.SerializeToString())


def forwarded(answer: Forward | AnswerHere) -> dict[str, str]:
    assert isinstance(answer, Forward), answer
    return dict(api_pb2.RunPodSandboxRequest.FromString(answer.message).config.annotations)


async def told_version(service: CRIService, name: str) -> None:
    tap = service.taps()[RUNTIME + "Version"]()
    reply = api_pb2.VersionResponse(runtime_name=name, runtime_version="1")
    tap(b"", Response(0, "", reply.SerializeToString()))


def on_service(tmp_path: Path, body) -> None:  # type: ignore[no-untyped-def]
    service = CRIService(EngineWorker(enforcer(tmp_path, StandInRuntime())))
    try:
        asyncio.run(body(service))
    finally:
        service.worker.close()


def test_cri_o_and_an_unnamed_runtime_never_see_the_beta_classes(tmp_path: Path) -> None:
    async def body(service: CRIService) -> None:
        # Before the runtime has named itself: hidden, the rest kept as sent.
        assert forwarded(await service.run_pod_sandbox(sandbox({**CLASSES, **OTHERS}))) == OTHERS
        await told_version(service, "cri-o")
        assert forwarded(await service.run_pod_sandbox(sandbox({**CLASSES, **OTHERS}))) == OTHERS
        # Nothing to hide: the request goes on as kubelet sent it, byte for byte.
        call = sandbox(OTHERS)
        answer = await service.run_pod_sandbox(call)
        assert isinstance(answer, Forward) and answer.message == call.message

    on_service(tmp_path, body)


def test_containerd_keeps_them_in_the_sandbox_it_rebuilds_a_lost_state_from(
    tmp_path: Path,
) -> None:
    async def body(service: CRIService) -> None:
        await told_version(service, "containerd")
        assert service.runtime_name == "containerd"
        call = sandbox({**CLASSES, **OTHERS})
        answer = await service.run_pod_sandbox(call)
        assert isinstance(answer, Forward) and answer.message == call.message
        # A failed or garbled Version answer leaves the name as it was.
        tap = service.taps()[RUNTIME + "Version"]()
        tap(b"", Response(0, "", b"\xff\xff"))
        tap(b"", Response(14, "unavailable", None))
        assert service.runtime_name == "containerd"

    on_service(tmp_path, body)


def test_a_garbled_sandbox_request_is_refused_with_its_reason(tmp_path: Path) -> None:
    async def body(service: CRIService) -> None:
        answer = await service.run_pod_sandbox(Call(RUNTIME + "RunPodSandbox", [], b"\xff\xff"))
        assert isinstance(answer, AnswerHere)
        assert answer.code == grpc.StatusCode.INVALID_ARGUMENT
        assert "RunPodSandboxRequest" in answer.message

    on_service(tmp_path, body)
