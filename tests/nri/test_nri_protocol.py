"""NRI of today beside NRI v0.6.1, over the real engine without a runtime: the version
exchange picks the events and the RDT field, the per-event calls of v0.12 act as their
StateChange events do, and a Synchronize split into parts is put together (bounded). The same
plugin on the real containerd 2.4.2 and 1.7 is in test_nri_runtimes_today.py."""

from __future__ import annotations

import asyncio

import pytest

from enforcer.engine.model import Pinning
from enforcer.nri.connection import TtrpcError
from enforcer.nri.convert import adjustment
from enforcer.nri.events import PER_EVENT
from enforcer.nri.protocol import V0_6_MASK, parse_version
from enforcer.nri.session import plugin_method
from enforcer.nri.sync_parts import SyncParts
from enforcer.nriapi import api_pb2
from tests.nri.test_nri_plugin import container, create_request, parts, pod  # noqa: F401

E = api_pb2.Event
UPDATE_POD_SANDBOX_BIT = 1 << (E.UPDATE_POD_SANDBOX - 1)


def configure(plugin, nri_version: str = "") -> int:
    request = api_pb2.ConfigureRequest(runtime_name="containerd", NRI_version=nri_version)
    answer = asyncio.run(plugin.configure(request.SerializeToString()))
    return api_pb2.ConfigureResponse.FromString(answer).events


@pytest.mark.parametrize(
    ("text", "want"),
    [("v0.12.3", (0, 12, 3)), ("0.10.0", (0, 10, 0)), ("v0.9.1-0.20250219030224-e597e7849f24",
     (0, 9, 1)), ("", None), ("unknown", None), ("v1", None), ("x0.12.3", None)],
)  # fmt: skip
def test_versions_parse_or_say_unknown(text: str, want) -> None:
    assert parse_version(text) == want


def test_the_event_mask_follows_the_runtimes_nri_version(parts) -> None:  # noqa: F811
    plugin = parts[0]
    # containerd 1.7 (v0.6.1) names no version: nothing over 0x7ff, or its Configure fails.
    legacy = configure(plugin)
    assert legacy & ~V0_6_MASK == 0 and not plugin.offer.rdt_clos
    # containerd 2.4.2 (v0.12.3): the same events and UpdatePodSandbox.
    today = configure(plugin, "v0.12.3")
    assert today == legacy | UPDATE_POD_SANDBOX_BIT
    assert plugin.offer.rdt_clos and plugin.offer.update_pod_sandbox
    # v0.9 (containerd 2.1) would say so (it does not): no UpdatePodSandbox yet.
    assert configure(plugin, "v0.9.4") == legacy


def test_the_rdt_class_goes_where_the_runtimes_version_applies_it() -> None:
    pinning = Pinning(cpus="1", mems="0")
    old = adjustment(pinning, "gold", rdt_clos=False)
    assert old.linux.resources.rdt_class.value == "gold" and not old.linux.HasField("rdt")
    new = adjustment(pinning, "gold", rdt_clos=True)
    # v0.11+ resolve resources.rdt_class against the runtime's own RDT configuration: unset.
    assert not new.linux.resources.HasField("rdt_class")
    assert new.linux.rdt.clos_id.value == "gold" and not new.linux.rdt.remove
    assert new.linux.resources.cpu.cpus == "1" and new.linux.resources.cpu.mems == "0"
    assert not adjustment(pinning, None, rdt_clos=True).linux.HasField("rdt")


def test_every_per_event_call_is_served_and_answers_an_empty_message(parts) -> None:  # noqa: F811
    handlers = parts[0].handlers()
    for method in (*PER_EVENT, "UpdatePodSandbox"):
        assert plugin_method(method) in handlers, method


def test_remove_container_as_its_own_call_releases_as_the_state_change_does(parts) -> None:  # noqa: F811
    plugin = parts[0]
    handlers = plugin.handlers()
    configure(plugin, "v0.12.3")

    async def main() -> None:
        sync = api_pb2.SynchronizeRequest().SerializeToString()
        await handlers[plugin_method("Synchronize")](sync)
        for name in ("g1", "g2", "g3"):  # CPUs 1-3: every exclusive CPU taken
            await handlers[plugin_method("CreateContainer")](create_request(name, 1000))
        with pytest.raises(TtrpcError):
            await handlers[plugin_method("CreateContainer")](create_request("g4", 1000))
        g2 = api_pb2.RemoveContainerRequest(pod=pod("g2"), container=container("g2", 1000))
        answer = await handlers[plugin_method("RemoveContainer")](g2.SerializeToString())
        assert api_pb2.RemoveContainerResponse.FromString(answer) == (
            api_pb2.RemoveContainerResponse()
        )
        # Its CPU is free again: the next Guaranteed container gets it.
        created = api_pb2.CreateContainerResponse.FromString(
            await handlers[plugin_method("CreateContainer")](create_request("g4", 1000))
        )
        assert created.adjust.linux.resources.cpu.cpus == "2"
        # Pod events as their own calls: RunPodSandbox records the pod, RemovePodSandbox
        # releases what the pod held.
        run = api_pb2.RunPodSandboxRequest(pod=pod("g5"))
        assert await handlers[plugin_method("RunPodSandbox")](run.SerializeToString()) == b""
        gone = api_pb2.RemovePodSandboxRequest(pod=pod("g1")).SerializeToString()
        await handlers[plugin_method("RemovePodSandbox")](gone)
        created = api_pb2.CreateContainerResponse.FromString(
            await handlers[plugin_method("CreateContainer")](create_request("g5", 1000))
        )
        assert created.adjust.linux.resources.cpu.cpus == "1"

    asyncio.run(main())


def test_update_pod_sandbox_records_the_pods_new_resources(parts) -> None:  # noqa: F811
    plugin, runtime, *_ = parts
    handler = plugin.handlers()[plugin_method("UpdatePodSandbox")]
    request = api_pb2.UpdatePodSandboxRequest(pod=pod("p"))
    request.linux_resources.cpu.quota.value = 200000
    assert asyncio.run(handler(request.SerializeToString())) == b""
    (seen,) = [p for p in runtime._pods.values() if p.id == "sb-p"]
    assert seen.linux.pod_resources.cpu.quota.value == 200000


def test_a_split_synchronize_is_answered_more_then_reconciled_whole(parts) -> None:  # noqa: F811
    plugin, _, kernel, _ = parts
    # A container that holds the would-be exclusive CPU, and in a later part its pod.
    kernel.cpus["c-be"] = "0-3"
    be = container("be", cpus="0-3", state=api_pb2.CONTAINER_RUNNING)
    g1 = container("g1", 1000, cpus="1", state=api_pb2.CONTAINER_RUNNING)
    kernel.cpus["c-g1"] = "1"
    first = api_pb2.SynchronizeRequest(pods=[pod("g1")], containers=[g1], more=True)
    last = api_pb2.SynchronizeRequest(pods=[pod("be", "besteffort")], containers=[be])

    async def main() -> tuple[api_pb2.SynchronizeResponse, api_pb2.SynchronizeResponse]:
        a = await plugin.synchronize(first.SerializeToString())
        assert not plugin.synchronized.is_set()
        b = await plugin.synchronize(last.SerializeToString())
        return (
            api_pb2.SynchronizeResponse.FromString(a),
            api_pb2.SynchronizeResponse.FromString(b),
        )

    part, whole = asyncio.run(main())
    # A part: more, and no updates (else containerd closes the plugin).
    assert part.more and not part.update
    assert not whole.more and plugin.synchronized.is_set()
    # The whole, from both parts: g1 keeps CPU 1, the BestEffort one moves off it.
    assert {u.container_id: u.linux.resources.cpu.cpus for u in whole.update} == {"c-be": "0,2-3"}


def test_the_parts_of_a_synchronize_are_bounded() -> None:
    parts_ = SyncParts(limit=1000)
    part = api_pb2.SynchronizeRequest(pods=[pod("a")], more=True)
    assert parts_.add(part, 600) is None
    with pytest.raises(Exception, match="over 1000 bytes"):
        parts_.add(part, 600)
    assert not parts_.pending  # dropped: the next Synchronize starts afresh
    pods, containers = parts_.add(api_pb2.SynchronizeRequest(pods=[pod("b")]), 10)
    assert [p.id for p in pods] == ["sb-b"] and containers == []


def test_an_oversized_split_synchronize_is_refused_resource_exhausted(parts) -> None:  # noqa: F811
    plugin = parts[0]
    plugin._sync_parts.limit = 100
    big = api_pb2.SynchronizeRequest(pods=[pod(f"p{i}") for i in range(5)], more=True)
    with pytest.raises(TtrpcError) as refused:
        asyncio.run(plugin.synchronize(big.SerializeToString()))
    assert refused.value.code == 8 and "Synchronize" in refused.value.message
