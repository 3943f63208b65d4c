"""The NRI and ttrpc messages: the generated modules are current, the field numbers and enum
values are those of NRI v0.12.3 (containerd 2.4.2) and keep every one of v0.6.1 (containerd
1.7), those of ttrpc, and unknown fields from newer runtimes parse."""

from __future__ import annotations

from pathlib import Path

import pytest
from google.protobuf.descriptor import FieldDescriptor as FD

from enforcer.nriapi import api_pb2, request_pb2
from tools import generate_nri as generate


def test_generated_modules_are_current(tmp_path: Path) -> None:
    generate.main(["--out", str(tmp_path)])
    for name in generate.GENERATED:
        committed = (generate.PACKAGE_DIR / name).read_bytes()
        assert (tmp_path / name).read_bytes() == committed, (
            f"enforcer/nriapi/{name} differs from a fresh generation: run `make proto` and "
            "commit the result"
        )


def test_generation_is_deterministic(tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    generate.generate(a)
    generate.generate(b)
    for name in generate.GENERATED:
        assert (a / name).read_bytes() == (b / name).read_bytes()


def test_services_as_in_v0_6_1_and_the_per_event_calls_of_v0_12() -> None:
    assert api_pb2.DESCRIPTOR.package == "nri.pkg.api.v1alpha1"
    plugin = api_pb2.DESCRIPTOR.services_by_name["Plugin"]
    runtime = api_pb2.DESCRIPTOR.services_by_name["Runtime"]
    assert [m.name for m in plugin.methods] == [
        "Configure", "Synchronize", "Shutdown", "CreateContainer", "UpdateContainer",
        "StopContainer", "StateChange",
        "RunPodSandbox", "UpdatePodSandbox", "StopPodSandbox", "RemovePodSandbox",
        "PostCreateContainer", "StartContainer", "PostStartContainer", "PostUpdateContainer",
        "RemoveContainer",
    ]  # fmt: skip
    for method in plugin.methods[7:]:
        assert method.input_type.name == f"{method.name}Request"
        assert method.output_type.name == f"{method.name}Response"
    assert [m.name for m in runtime.methods] == ["RegisterPlugin", "UpdateContainers"]
    assert plugin.full_name == "nri.pkg.api.v1alpha1.Plugin"
    assert runtime.methods_by_name["UpdateContainers"].output_type.name == (
        "UpdateContainersResponse"
    )


def test_event_numbers() -> None:
    assert [(v.name, v.number) for v in api_pb2.Event.DESCRIPTOR.values] == [
        ("UNKNOWN", 0), ("RUN_POD_SANDBOX", 1), ("STOP_POD_SANDBOX", 2),
        ("REMOVE_POD_SANDBOX", 3), ("CREATE_CONTAINER", 4), ("POST_CREATE_CONTAINER", 5),
        ("START_CONTAINER", 6), ("POST_START_CONTAINER", 7), ("UPDATE_CONTAINER", 8),
        ("POST_UPDATE_CONTAINER", 9), ("STOP_CONTAINER", 10), ("REMOVE_CONTAINER", 11),
        ("UPDATE_POD_SANDBOX", 12), ("POST_UPDATE_POD_SANDBOX", 13),
        ("VALIDATE_CONTAINER_ADJUSTMENT", 14), ("LAST", 15),
    ]  # fmt: skip
    assert [(v.name, v.number) for v in api_pb2.ContainerState.DESCRIPTOR.values] == [
        ("CONTAINER_UNKNOWN", 0), ("CONTAINER_CREATED", 1), ("CONTAINER_PAUSED", 2),
        ("CONTAINER_RUNNING", 3), ("CONTAINER_STOPPED", 4),
    ]  # fmt: skip


S, I32, I64, U32, U64, B, BYTES, MSG, ENUM = (
    FD.TYPE_STRING, FD.TYPE_INT32, FD.TYPE_INT64, FD.TYPE_UINT32, FD.TYPE_UINT64, FD.TYPE_BOOL,
    FD.TYPE_BYTES, FD.TYPE_MESSAGE, FD.TYPE_ENUM,
)  # fmt: skip
REP, MAP = "repeated", "map"

# NRI v0.12.3 pkg/api/api.proto (v0.6.1's and what v0.12 adds), the messages the plugin reads
# and writes.
POD_ONLY = {"pod": (1, MSG, "PodSandbox")}
POD_AND_CONTAINER = {"pod": (1, MSG, "PodSandbox"), "container": (2, MSG, "Container")}
NRI_FIELDS: dict[str, dict[str, tuple]] = {
    "RegisterPluginRequest": {"plugin_name": (1, S), "plugin_idx": (2, S), "NRI_version": (3, S)},
    "UpdateContainersRequest": {
        "update": (1, MSG, "ContainerUpdate", REP), "evict": (2, MSG, "ContainerEviction", REP),
    },
    "UpdateContainersResponse": {"failed": (1, MSG, "ContainerUpdate", REP)},
    "ConfigureRequest": {
        "config": (1, S), "runtime_name": (2, S), "runtime_version": (3, S),
        "registration_timeout": (4, I64), "request_timeout": (5, I64), "NRI_version": (6, S),
    },
    "ConfigureResponse": {"events": (2, I32)},
    "SynchronizeRequest": {
        "pods": (1, MSG, "PodSandbox", REP), "containers": (2, MSG, "Container", REP),
        "more": (3, B),
    },
    "SynchronizeResponse": {"update": (1, MSG, "ContainerUpdate", REP), "more": (2, B)},
    "RunPodSandboxRequest": POD_ONLY,
    "StopPodSandboxRequest": POD_ONLY,
    "RemovePodSandboxRequest": POD_ONLY,
    "UpdatePodSandboxRequest": {
        **POD_ONLY, "overhead_linux_resources": (2, MSG, "LinuxResources"),
        "linux_resources": (3, MSG, "LinuxResources"),
    },
    "PostCreateContainerRequest": POD_AND_CONTAINER,
    "StartContainerRequest": POD_AND_CONTAINER,
    "RemoveContainerRequest": POD_AND_CONTAINER,
    "CreateContainerRequest": {"pod": (1, MSG, "PodSandbox"), "container": (2, MSG, "Container")},
    "CreateContainerResponse": {
        "adjust": (1, MSG, "ContainerAdjustment"), "update": (2, MSG, "ContainerUpdate", REP),
        "evict": (3, MSG, "ContainerEviction", REP),
    },
    "UpdateContainerRequest": {
        "pod": (1, MSG, "PodSandbox"), "container": (2, MSG, "Container"),
        "linux_resources": (3, MSG, "LinuxResources"),
    },
    "UpdateContainerResponse": {
        "update": (1, MSG, "ContainerUpdate", REP), "evict": (2, MSG, "ContainerEviction", REP),
    },
    "StopContainerRequest": {"pod": (1, MSG, "PodSandbox"), "container": (2, MSG, "Container")},
    "StopContainerResponse": {"update": (1, MSG, "ContainerUpdate", REP)},
    "StateChangeEvent": {
        "event": (1, ENUM, "Event"), "pod": (2, MSG, "PodSandbox"),
        "container": (3, MSG, "Container"),
    },
    "PodSandbox": {
        "id": (1, S), "name": (2, S), "uid": (3, S), "namespace": (4, S),
        "labels": (5, MSG, None, MAP),
        "annotations": (6, MSG, None, MAP), "runtime_handler": (7, S),
        "linux": (8, MSG, "LinuxPodSandbox"), "pid": (9, U32),
    },
    "LinuxPodSandbox": {
        "pod_overhead": (1, MSG, "LinuxResources"), "pod_resources": (2, MSG, "LinuxResources"),
        "cgroup_parent": (3, S), "cgroups_path": (4, S),
        "namespaces": (5, MSG, "LinuxNamespace", REP), "resources": (6, MSG, "LinuxResources"),
    },
    "Container": {
        "id": (1, S), "pod_sandbox_id": (2, S), "name": (3, S),
        "state": (4, ENUM, "ContainerState"), "labels": (5, MSG, None, MAP),
        "annotations": (6, MSG, None, MAP), "args": (7, S, None, REP),
        "env": (8, S, None, REP), "mounts": (9, MSG, "Mount", REP), "hooks": (10, MSG, "Hooks"),
        "linux": (11, MSG, "LinuxContainer"), "pid": (12, U32),
        "rlimits": (13, MSG, "POSIXRlimit", REP),
    },
    "LinuxContainer": {
        "namespaces": (1, MSG, "LinuxNamespace", REP), "devices": (2, MSG, "LinuxDevice", REP),
        "resources": (3, MSG, "LinuxResources"), "oom_score_adj": (4, MSG, "OptionalInt"),
        "cgroups_path": (5, S),
    },
    "LinuxResources": {
        "memory": (1, MSG, "LinuxMemory"), "cpu": (2, MSG, "LinuxCPU"),
        "hugepage_limits": (3, MSG, "HugepageLimit", REP),
        "blockio_class": (4, MSG, "OptionalString"), "rdt_class": (5, MSG, "OptionalString"),
        "unified": (6, MSG, None, MAP), "devices": (7, MSG, "LinuxDeviceCgroup", REP),
    },
    "LinuxMemory": {
        "limit": (1, MSG, "OptionalInt64"), "reservation": (2, MSG, "OptionalInt64"),
        "swap": (3, MSG, "OptionalInt64"), "kernel": (4, MSG, "OptionalInt64"),
        "kernel_tcp": (5, MSG, "OptionalInt64"), "swappiness": (6, MSG, "OptionalUInt64"),
        "disable_oom_killer": (7, MSG, "OptionalBool"), "use_hierarchy": (8, MSG, "OptionalBool"),
    },
    "LinuxCPU": {
        "shares": (1, MSG, "OptionalUInt64"), "quota": (2, MSG, "OptionalInt64"),
        "period": (3, MSG, "OptionalUInt64"), "realtime_runtime": (4, MSG, "OptionalInt64"),
        "realtime_period": (5, MSG, "OptionalUInt64"), "cpus": (6, S), "mems": (7, S),
    },
    "ContainerAdjustment": {
        "annotations": (2, MSG, None, MAP), "mounts": (3, MSG, "Mount", REP),
        "env": (4, MSG, "KeyValue", REP), "hooks": (5, MSG, "Hooks"),
        "linux": (6, MSG, "LinuxContainerAdjustment"), "rlimits": (7, MSG, "POSIXRlimit", REP),
    },
    "LinuxContainerAdjustment": {
        "devices": (1, MSG, "LinuxDevice", REP), "resources": (2, MSG, "LinuxResources"),
        "cgroups_path": (3, S), "rdt": (11, MSG, "LinuxRdt"),
    },
    "LinuxRdt": {
        "clos_id": (1, MSG, "OptionalString"), "enable_monitoring": (3, MSG, "OptionalBool"),
        "remove": (4, B),
    },
    "ContainerUpdate": {
        "container_id": (1, S), "linux": (2, MSG, "LinuxContainerUpdate"), "ignore_failure": (3, B),
    },
    "LinuxContainerUpdate": {"resources": (1, MSG, "LinuxResources")},
    "ContainerEviction": {"container_id": (1, S), "reason": (2, S)},
    "OptionalString": {"value": (1, S)},
    "OptionalInt64": {"value": (1, I64)},
    "OptionalUInt64": {"value": (1, U64)},
    "OptionalBool": {"value": (1, B)},
}  # fmt: skip

# containerd/ttrpc request.proto, and google.rpc.Status / google.protobuf.Any's numbers.
TTRPC_FIELDS: dict[str, dict[str, tuple]] = {
    "Request": {
        "service": (1, S), "method": (2, S), "payload": (3, BYTES), "timeout_nano": (4, I64),
        "metadata": (5, MSG, "KeyValue", REP),
    },
    "Response": {"status": (1, MSG, "Status"), "payload": (2, BYTES)},
    "KeyValue": {"key": (1, S), "value": (2, S)},
    "Status": {"code": (1, I32), "message": (2, S), "details": (3, MSG, "Any", REP)},
    "Any": {"type_url": (1, S), "value": (2, BYTES)},
}  # fmt: skip


def _check(module, package: str, message: str, spec: dict[str, tuple]) -> None:
    desc = module.DESCRIPTOR.message_types_by_name[message]
    assert len(desc.fields) >= len(spec)
    for name, item in spec.items():
        number, ftype, type_name, label = (*item, None, None)[:4]
        field = desc.fields_by_name.get(name)
        assert field is not None, f"{message}.{name} missing"
        assert field.number == number, f"{message}.{name} = {field.number}, want {number}"
        assert field.type == ftype, f"{message}.{name}: type {field.type}, want {ftype}"
        is_map = field.message_type is not None and field.message_type.GetOptions().map_entry
        assert is_map == (label == MAP), f"{message}.{name}: map={is_map}"
        if not is_map:
            assert field.is_repeated == (label == REP), f"{message}.{name} repeated"
        if type_name:
            ref = field.message_type or field.enum_type
            assert ref.full_name == f"{package}.{type_name}"


@pytest.mark.parametrize("message", sorted(NRI_FIELDS))
def test_nri_field_numbers(message: str) -> None:
    _check(api_pb2, "nri.pkg.api.v1alpha1", message, NRI_FIELDS[message])


@pytest.mark.parametrize("message", sorted(TTRPC_FIELDS))
def test_ttrpc_field_numbers(message: str) -> None:
    _check(request_pb2, "ttrpc", message, TTRPC_FIELDS[message])


def test_status_has_the_wire_format_of_google_rpc_status() -> None:
    # What a Go ttrpc peer writes for status.New(codes.Unimplemented, "x"): field 1 varint
    # 12, field 2 the message.
    wire = bytes([0x08, 12, 0x12, 1]) + b"x"
    status = request_pb2.Status.FromString(wire)
    assert (status.code, status.message) == (12, "x")


def test_unknown_fields_from_a_newer_runtime_parse() -> None:
    # A newer runtime's CreateContainerRequest: an unknown top-level field 9 and an unknown
    # field 20 inside the container.
    container = api_pb2.Container(id="c1", name="app").SerializeToString()
    container += bytes([20 << 3 | 2 | 0x80, 1, 3]) + b"new"  # tag 162 as a two-byte varint
    wire = bytes([2 << 3 | 2, len(container)]) + container + bytes([9 << 3 | 0, 1])
    request = api_pb2.CreateContainerRequest.FromString(wire)
    assert (request.container.id, request.container.name) == ("c1", "app")
    # And an event number this version does not name.
    event = api_pb2.StateChangeEvent.FromString(bytes([0x08, 42]))
    assert event.event == 42
