"""The CRI messages: generated modules are current, field numbers match upstream, and unknown
fields survive a parse -> modify -> serialise round trip (what lets the relay rewrite safely)."""

from __future__ import annotations

from pathlib import Path

import pytest
from google.protobuf.descriptor import FieldDescriptor as FD

from enforcer.cri import api_pb2, api_pb2_grpc
from tools import generate_cri as generate

# -- generated code is current ----------------------------------------------------------------


def test_generated_modules_are_current(tmp_path: Path) -> None:
    generate.main(["--out", str(tmp_path)])
    for name in generate.GENERATED:
        committed = (generate.PACKAGE_DIR / name).read_bytes()
        fresh = (tmp_path / name).read_bytes()
        assert fresh == committed, (
            f"enforcer/cri/{name} differs from a fresh generation (grpcio-tools {_tools_version()} "
            f"here; committed modules made by grpcio-tools {_committed_tools_version()}): "
            "run `make proto` and commit the result"
        )


def _tools_version() -> str:
    from importlib.metadata import version

    return version("grpcio-tools")


def _committed_tools_version() -> str:
    text = (generate.PACKAGE_DIR / "api_pb2_grpc.py").read_text()
    return text.split("GRPC_GENERATED_VERSION = '", 1)[-1].split("'", 1)[0]


def test_generation_is_deterministic(tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    generate.generate(a)
    generate.generate(b)
    for name in generate.GENERATED:
        assert (a / name).read_bytes() == (b / name).read_bytes()


def test_grpc_module_uses_package_relative_import() -> None:
    text = (generate.PACKAGE_DIR / "api_pb2_grpc.py").read_text()
    assert "from . import api_pb2 as" in text
    assert "from cri import" not in text and "\nimport api_pb2" not in text


# -- services -----------------------------------------------------------------------------------


RUNTIME_METHODS = [
    "Version", "RunPodSandbox", "StopPodSandbox", "RemovePodSandbox", "PodSandboxStatus",
    "ListPodSandbox", "CreateContainer", "StartContainer", "StopContainer", "RemoveContainer",
    "ListContainers", "ContainerStatus", "UpdateContainerResources", "ExecSync",
    "ContainerStats", "ListContainerStats", "Status", "GetContainerEvents",
]  # fmt: skip
IMAGE_METHODS = ["ListImages", "ImageStatus", "PullImage", "RemoveImage", "ImageFsInfo"]


def test_services_and_methods() -> None:
    assert api_pb2.DESCRIPTOR.package == "runtime.v1"
    runtime = api_pb2.DESCRIPTOR.services_by_name["RuntimeService"]
    image = api_pb2.DESCRIPTOR.services_by_name["ImageService"]
    assert runtime.full_name == "runtime.v1.RuntimeService"
    assert image.full_name == "runtime.v1.ImageService"
    for name in RUNTIME_METHODS:
        assert name in runtime.methods_by_name, name
    for name in IMAGE_METHODS:
        assert name in image.methods_by_name, name
    events = runtime.methods_by_name["GetContainerEvents"]
    assert events.server_streaming and not events.client_streaming
    assert events.input_type.name == "GetEventsRequest"
    assert events.output_type.name == "ContainerEventResponse"
    # Only GetContainerEvents streams among the methods we declare.
    streaming = [m.name for m in runtime.methods if m.server_streaming or m.client_streaming]
    assert streaming == ["GetContainerEvents"]
    assert hasattr(api_pb2_grpc, "RuntimeServiceStub")
    assert hasattr(api_pb2_grpc, "add_ImageServiceServicer_to_server")


# -- field numbers (FACTS.md, checked against k8s.io/cri-api) ---------------------------------

S, I64, U32, U64, B, MSG, ENUM = (
    FD.TYPE_STRING, FD.TYPE_INT64, FD.TYPE_UINT32, FD.TYPE_UINT64, FD.TYPE_BOOL,
    FD.TYPE_MESSAGE, FD.TYPE_ENUM,
)  # fmt: skip
REP = "repeated"
MAP = "map"

# message -> {field: (number, type, message/enum type name or None, label)}
FIELDS: dict[str, dict[str, tuple]] = {
    "CreateContainerRequest": {
        "pod_sandbox_id": (1, S), "config": (2, MSG, "ContainerConfig"),
        "sandbox_config": (3, MSG, "PodSandboxConfig"),
    },
    "ContainerConfig": {
        "metadata": (1, MSG, "ContainerMetadata"), "image": (2, MSG, "ImageSpec"),
        "command": (3, S, None, REP), "args": (4, S, None, REP), "working_dir": (5, S),
        "envs": (6, MSG, "KeyValue", REP), "mounts": (7, MSG, "Mount", REP),
        "devices": (8, MSG, "Device", REP), "labels": (9, MSG, None, MAP),
        "annotations": (10, MSG, None, MAP), "log_path": (11, S), "stdin": (12, B),
        "stdin_once": (13, B), "tty": (14, B), "linux": (15, MSG, "LinuxContainerConfig"),
        "windows": (16, MSG, "WindowsContainerConfig"),
        "CDI_devices": (17, MSG, "CDIDevice", REP), "stop_signal": (18, ENUM, "Signal"),
    },
    "ImageSpec": {
        "image": (1, S), "annotations": (2, MSG, None, MAP), "user_specified_image": (18, S),
        "runtime_handler": (19, S),
    },
    "KeyValue": {"key": (1, S), "value": (2, S)},
    "ContainerMetadata": {"name": (1, S), "attempt": (2, U32)},
    "LinuxContainerConfig": {
        "resources": (1, MSG, "LinuxContainerResources"),
        "security_context": (2, MSG, "LinuxContainerSecurityContext"),
    },
    "LinuxContainerResources": {
        "cpu_period": (1, I64), "cpu_quota": (2, I64), "cpu_shares": (3, I64),
        "memory_limit_in_bytes": (4, I64), "oom_score_adj": (5, I64), "cpuset_cpus": (6, S),
        "cpuset_mems": (7, S), "hugepage_limits": (8, MSG, "HugepageLimit", REP),
        "unified": (9, MSG, None, MAP), "memory_swap_limit_in_bytes": (10, I64),
    },
    "HugepageLimit": {"page_size": (1, S), "limit": (2, U64)},
    "UpdateContainerResourcesRequest": {
        "container_id": (1, S), "linux": (2, MSG, "LinuxContainerResources"),
        "windows": (3, MSG, "WindowsContainerResources"), "annotations": (4, MSG, None, MAP),
    },
    "RunPodSandboxRequest": {"config": (1, MSG, "PodSandboxConfig"), "runtime_handler": (2, S)},
    "RunPodSandboxResponse": {"pod_sandbox_id": (1, S)},
    "PodSandboxConfig": {
        "metadata": (1, MSG, "PodSandboxMetadata"), "hostname": (2, S), "log_directory": (3, S),
        "dns_config": (4, MSG, "DNSConfig"), "port_mappings": (5, MSG, "PortMapping", REP),
        "labels": (6, MSG, None, MAP), "annotations": (7, MSG, None, MAP),
        "linux": (8, MSG, "LinuxPodSandboxConfig"), "windows": (9, MSG, "WindowsPodSandboxConfig"),
    },
    "PodSandboxMetadata": {"name": (1, S), "uid": (2, S), "namespace": (3, S), "attempt": (4, U32)},
    "LinuxPodSandboxConfig": {
        "cgroup_parent": (1, S), "security_context": (2, MSG, "LinuxSandboxSecurityContext"),
        "sysctls": (3, MSG, None, MAP), "overhead": (4, MSG, "LinuxContainerResources"),
        "resources": (5, MSG, "LinuxContainerResources"),
    },
    "LinuxSandboxSecurityContext": {"namespace_options": (1, MSG, "NamespaceOption")},
    "NamespaceOption": {
        "network": (1, ENUM, "NamespaceMode"), "pid": (2, ENUM, "NamespaceMode"),
        "ipc": (3, ENUM, "NamespaceMode"),
    },
    "StartContainerRequest": {"container_id": (1, S)},
    "StopContainerRequest": {"container_id": (1, S), "timeout": (2, I64)},
    "RemoveContainerRequest": {"container_id": (1, S)},
    "StopPodSandboxRequest": {"pod_sandbox_id": (1, S)},
    "RemovePodSandboxRequest": {"pod_sandbox_id": (1, S)},
    "CreateContainerResponse": {"container_id": (1, S)},
}  # fmt: skip


@pytest.mark.parametrize("message", sorted(FIELDS))
def test_field_numbers(message: str) -> None:
    desc = api_pb2.DESCRIPTOR.message_types_by_name[message]
    for name, spec in FIELDS[message].items():
        number, ftype, type_name, label = (*spec, None, None)[:4]
        field = desc.fields_by_name.get(name)
        assert field is not None, f"{message}.{name} missing"
        assert field.number == number, f"{message}.{name} = {field.number}, want {number}"
        assert field.type == ftype, f"{message}.{name} has wire type {field.type}, want {ftype}"
        is_map = field.message_type is not None and field.message_type.GetOptions().map_entry
        if label == MAP:
            assert is_map, f"{message}.{name} should be a map"
            assert field.message_type.fields_by_name["key"].type == S
            assert field.message_type.fields_by_name["value"].type == S
        else:
            assert not is_map
            repeated = field.is_repeated
            assert repeated == (label == REP), f"{message}.{name} repeated={repeated}"
        if type_name:
            ref = field.message_type or field.enum_type
            assert ref.full_name == f"runtime.v1.{type_name}"


def test_namespace_mode_values() -> None:
    assert [(v.name, v.number) for v in api_pb2.NamespaceMode.DESCRIPTOR.values] == [
        ("POD", 0), ("CONTAINER", 1), ("NODE", 2), ("TARGET", 3),
    ]  # fmt: skip


def test_every_field_number_is_unique_per_message() -> None:
    def walk(descs):
        for d in descs:
            yield d
            yield from walk(d.nested_types)

    for desc in walk(api_pb2.DESCRIPTOR.message_types_by_name.values()):
        numbers = [f.number for f in desc.fields]
        assert len(numbers) == len(set(numbers)), desc.full_name


# -- unknown fields survive a rewrite --------------------------------------------------------


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def _len_field(number: int, payload: bytes) -> bytes:
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


def _varint_field(number: int, value: int) -> bytes:
    return _varint(number << 3 | 0) + _varint(value)


def _fields(data: bytes) -> list[tuple[int, int, bytes | int]]:
    """Minimal wire decoder: (number, wire type, value) of the top-level fields of ``data``."""
    out = []
    i = 0

    def read_varint() -> int:
        nonlocal i
        shift = value = 0
        while True:
            b = data[i]
            i += 1
            value |= (b & 0x7F) << shift
            shift += 7
            if not b & 0x80:
                return value

    while i < len(data):
        key = read_varint()
        number, wt = key >> 3, key & 7
        if wt == 0:
            out.append((number, wt, read_varint()))
        elif wt == 2:
            n = read_varint()
            out.append((number, wt, data[i : i + n]))
            i += n
        elif wt == 1:
            out.append((number, wt, data[i : i + 8]))
            i += 8
        elif wt == 5:
            out.append((number, wt, data[i : i + 4]))
            i += 4
        else:
            raise ValueError(f"unexpected wire type {wt}")
    return out


def _one(data: bytes, number: int) -> bytes | int:
    found = [v for n, _, v in _fields(data) if n == number]
    assert len(found) == 1, f"field {number}: {len(found)} occurrences"
    return found[0]


def _kubelet_request_with_unknown_fields() -> bytes:
    """A CreateContainerRequest as a newer kubelet might send it: fields we do not know."""
    resources = api_pb2.LinuxContainerResources(
        cpu_period=100000, cpu_quota=200000, cpu_shares=2048, memory_limit_in_bytes=1 << 30
    ).SerializeToString()
    # Unknown inside LinuxContainerResources: a varint field 42 and a string field 43.
    resources += _varint_field(42, 7) + _len_field(43, b"future-knob")
    linux = _len_field(1, resources)
    config = api_pb2.ContainerConfig(
        metadata=api_pb2.ContainerMetadata(name="app"),
        image=api_pb2.ImageSpec(image="busybox"),
    ).SerializeToString()
    config += _len_field(15, linux)
    sandbox = api_pb2.PodSandboxConfig(
        metadata=api_pb2.PodSandboxMetadata(name="p", uid="u", namespace="ns"),
        annotations={"a": "b"},
    ).SerializeToString()
    request = (
        api_pb2.CreateContainerRequest(pod_sandbox_id="sb").SerializeToString()
        + _len_field(2, config)
        + _len_field(3, sandbox)
    )
    # Unknown at the top level: field 99, length-delimited.
    return request + _len_field(99, b"keep me")


def test_unknown_fields_survive_rewrite() -> None:
    # The numbers used below really are unknown to our messages.
    assert 99 not in api_pb2.CreateContainerRequest.DESCRIPTOR.fields_by_number
    assert not {42, 43} & set(api_pb2.LinuxContainerResources.DESCRIPTOR.fields_by_number)
    wire = _kubelet_request_with_unknown_fields()
    req = api_pb2.CreateContainerRequest()
    req.ParseFromString(wire)
    assert req.config.linux.resources.cpu_shares == 2048

    req.config.linux.resources.cpuset_cpus = "2-3"
    out = req.SerializeToString()

    # Top level: the unknown field 99 is still there, byte for byte.
    assert _one(out, 99) == b"keep me"
    # Nested: CreateContainerRequest.config(2).linux(15).resources(1) keeps 42 and 43 too.
    resources = _one(_one(_one(out, 2), 15), 1)
    assert _one(resources, 42) == 7
    assert _one(resources, 43) == b"future-knob"
    assert _one(resources, 6) == b"2-3"  # our rewrite
    assert _one(resources, 3) == 2048

    again = api_pb2.CreateContainerRequest.FromString(out)
    assert again.config.linux.resources.cpuset_cpus == "2-3"
    assert again.sandbox_config.annotations == {"a": "b"}
    assert again.SerializeToString() == out


def test_unknown_fields_survive_update_request() -> None:
    linux = api_pb2.LinuxContainerResources(cpu_shares=512).SerializeToString()
    linux += _varint_field(77, 1)
    wire = _len_field(2, linux) + _len_field(1, b"cid") + _varint_field(50, 3)
    req = api_pb2.UpdateContainerResourcesRequest.FromString(wire)
    req.linux.cpuset_cpus = "0"
    out = req.SerializeToString()
    assert _one(out, 50) == 3
    assert _one(_one(out, 2), 77) == 1
