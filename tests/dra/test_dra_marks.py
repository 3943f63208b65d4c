"""How each transport recognises a container of a prepared claim: the CDI device id kubelet
passes in CreateContainerRequest (relay), the CDI spec's environment variable containerd has
injected before NRI's CreateContainer (NRI plugin); the spec file the driver writes says both."""

from __future__ import annotations

import json
from pathlib import Path

from enforcer.cri import api_pb2 as cri
from enforcer.cri.convert import container_create as cri_create
from enforcer.decode.dra_claims import MAX_CLAIMS, claims_from_cdi, claims_from_env
from enforcer.dra.cdi import remove_spec, spec_path, write_spec
from enforcer.nri.convert import container_create as nri_create
from enforcer.nriapi import api_pb2 as nri

UID = "0b5c2f0e-1f1e-4c51-9a55-3b1f2a1c7d10"


def test_the_spec_written_marks_the_container_both_ways(tmp_path: Path) -> None:
    path = write_spec(tmp_path, UID)
    assert path == spec_path(tmp_path, UID)
    spec = json.loads(path.read_text())
    (device,) = spec["devices"]
    assert claims_from_cdi([f"{spec['kind']}={device['name']}"]) == (UID,)
    assert claims_from_env(device["containerEdits"]["env"]) == (UID,)
    assert path.stat().st_mode & 0o777 == 0o644
    remove_spec(tmp_path, UID)
    remove_spec(tmp_path, UID)  # already gone: nothing
    assert not path.exists()


def test_the_relay_reads_the_cdi_device_of_the_create_request() -> None:
    request = cri.CreateContainerRequest()
    request.config.CDI_devices.add(name="nvidia.com/gpu=0")
    request.config.CDI_devices.add(name=f"cpu.resource-enforcer.dev/claim={UID}")
    assert cri_create(request).dra_claims == (UID,)


def test_the_nri_plugin_reads_the_injected_environment() -> None:
    container = nri.Container(env=["PATH=/bin", f"KRE_DRA_CLAIM_{UID.replace('-', '_')}={UID}"])
    assert nri_create(nri.PodSandbox(), container).dra_claims == (UID,)


def test_forged_or_foreign_marks_are_ignored_and_bounded() -> None:
    assert claims_from_env(["KRE_DRA_CLAIM_x=y", "KRE_DRA_CLAIM_a_b=a-c", "OTHER=1"]) == ()
    assert claims_from_cdi(["cpu.resource-enforcer.dev/claim=../x", "x/claim=1"]) == ()
    many = [f"cpu.resource-enforcer.dev/claim=u{i}" for i in range(100)]
    assert len(claims_from_cdi(many)) == MAX_CLAIMS
