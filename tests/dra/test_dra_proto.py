"""The DRA kubelet plugin and plugin-registration messages: the generated modules are current,
and names, field numbers and method paths are those kubelet v1.37 speaks (k8s.io/kubelet
pkg/apis/dra/v1 and pkg/apis/pluginregistration/v1)."""

from __future__ import annotations

from pathlib import Path

from google.protobuf.descriptor import FieldDescriptor as FD

from enforcer.draapi import dra_pb2, generate, registration_pb2


def test_generated_modules_are_current(tmp_path: Path) -> None:
    generate.main(["--out", str(tmp_path)])
    for name in generate.GENERATED:
        committed = (generate.PACKAGE_DIR / name).read_bytes()
        assert (tmp_path / name).read_bytes() == committed, (
            f"enforcer/draapi/{name} differs from a fresh generation: run `make proto` and "
            "commit the result"
        )


def _fields(message: type) -> dict[str, tuple[int, int, bool]]:
    return {
        f.name: (f.number, f.type, f.is_repeated)
        for f in message.DESCRIPTOR.fields  # type: ignore[attr-defined]
    }


def test_dra_v1_wire_format() -> None:
    assert dra_pb2.DESCRIPTOR.package == "k8s.io.kubelet.pkg.apis.dra.v1"
    service = dra_pb2.DESCRIPTOR.services_by_name["DRAPlugin"]
    assert [m.name for m in service.methods] == ["NodePrepareResources", "NodeUnprepareResources"]
    assert _fields(dra_pb2.Claim) == {
        "namespace": (1, FD.TYPE_STRING, False),
        "uid": (2, FD.TYPE_STRING, False),
        "name": (3, FD.TYPE_STRING, False),
    }
    assert _fields(dra_pb2.Device) == {
        "request_names": (1, FD.TYPE_STRING, True),
        "pool_name": (2, FD.TYPE_STRING, False),
        "device_name": (3, FD.TYPE_STRING, False),
        "cdi_device_ids": (4, FD.TYPE_STRING, True),
        "share_id": (5, FD.TYPE_STRING, False),
    }
    assert _fields(dra_pb2.NodePrepareResourceResponse) == {
        "devices": (1, FD.TYPE_MESSAGE, True),
        "error": (2, FD.TYPE_STRING, False),
    }
    assert _fields(dra_pb2.NodeUnprepareResourceResponse) == {"error": (1, FD.TYPE_STRING, False)}
    for request in (dra_pb2.NodePrepareResourcesRequest, dra_pb2.NodeUnprepareResourcesRequest):
        assert _fields(request) == {"claims": (1, FD.TYPE_MESSAGE, True)}
    # A map on the wire: repeated entries of (key = 1, value = 2), keyed by the claim's uid.
    response = dra_pb2.NodePrepareResourcesResponse()
    response.claims["uid-1"].error = "boom"
    entry = dra_pb2.NodePrepareResourcesResponse.DESCRIPTOR.fields_by_name["claims"]
    assert entry.number == 1 and entry.message_type.GetOptions().map_entry
    again = dra_pb2.NodePrepareResourcesResponse.FromString(response.SerializeToString())
    assert again.claims["uid-1"].error == "boom"


def test_plugin_registration_wire_format() -> None:
    assert registration_pb2.DESCRIPTOR.package == "pluginregistration"
    service = registration_pb2.DESCRIPTOR.services_by_name["Registration"]
    assert [m.name for m in service.methods] == ["GetInfo", "NotifyRegistrationStatus"]
    assert _fields(registration_pb2.PluginInfo) == {
        "type": (1, FD.TYPE_STRING, False),
        "name": (2, FD.TYPE_STRING, False),
        "endpoint": (3, FD.TYPE_STRING, False),
        "supported_versions": (4, FD.TYPE_STRING, True),
    }
    assert _fields(registration_pb2.RegistrationStatus) == {
        "plugin_registered": (1, FD.TYPE_BOOL, False),
        "error": (2, FD.TYPE_STRING, False),
    }
