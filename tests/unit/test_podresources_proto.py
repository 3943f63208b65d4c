"""kubelet's pod-resources (v1) and device-plugin (v1beta1) messages: the committed modules are
what the generator makes of the vendored v1.37.2 protos, and the names, field numbers and
method paths are those kubelet speaks."""

from __future__ import annotations

from pathlib import Path

from google.protobuf.descriptor import FieldDescriptor as FD

from enforcer.podresourcesapi import podresources_pb2
from tests.support.devicepluginapi import deviceplugin_pb2
from tools import generate_podresources as generate


def test_generated_modules_are_current(tmp_path: Path) -> None:
    generate.main(["--out", str(tmp_path)])
    for stem, names in generate.GENERATED.items():
        folder = generate.target_dir(stem, None)
        for name in names:
            assert (tmp_path / name).read_bytes() == (folder / name).read_bytes(), (
                f"{folder / name} differs from a fresh generation: run `make proto` and commit"
            )


def _fields(message: type) -> dict[str, tuple[int, int, bool]]:
    return {
        f.name: (f.number, f.type, f.is_repeated)
        for f in message.DESCRIPTOR.fields  # type: ignore[attr-defined]
    }


def test_pod_resources_v1_wire_format() -> None:
    assert podresources_pb2.DESCRIPTOR.package == "v1"
    service = podresources_pb2.DESCRIPTOR.services_by_name["PodResourcesLister"]
    assert [m.name for m in service.methods] == ["List", "GetAllocatableResources", "Get"]
    assert _fields(podresources_pb2.ContainerResources) == {
        "name": (1, FD.TYPE_STRING, False),
        "devices": (2, FD.TYPE_MESSAGE, True),
        "cpu_ids": (3, FD.TYPE_INT64, True),
        "memory": (4, FD.TYPE_MESSAGE, True),
        "dynamic_resources": (5, FD.TYPE_MESSAGE, True),
    }
    assert _fields(podresources_pb2.ContainerDevices) == {
        "resource_name": (1, FD.TYPE_STRING, False),
        "device_ids": (2, FD.TYPE_STRING, True),
        "topology": (3, FD.TYPE_MESSAGE, False),
    }
    assert _fields(podresources_pb2.NUMANode) == {"ID": (1, FD.TYPE_INT64, False)}
    claim = _fields(podresources_pb2.ClaimResource)
    assert claim["driver_name"][0] == 2 and claim["pool_name"][0] == 3
    assert claim["device_name"][0] == 4


def test_device_plugin_v1beta1_wire_format() -> None:
    assert deviceplugin_pb2.DESCRIPTOR.package == "v1beta1"
    services = deviceplugin_pb2.DESCRIPTOR.services_by_name
    assert [m.name for m in services["Registration"].methods] == ["Register"]
    assert [m.name for m in services["DevicePlugin"].methods] == [
        "GetDevicePluginOptions",
        "ListAndWatch",
        "GetPreferredAllocation",
        "Allocate",
        "PreStartContainer",
    ]
    assert _fields(deviceplugin_pb2.Device) == {
        "ID": (1, FD.TYPE_STRING, False),
        "health": (2, FD.TYPE_STRING, False),
        "topology": (3, FD.TYPE_MESSAGE, False),
    }
