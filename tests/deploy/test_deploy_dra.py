"""deploy/dra/: the DeviceClass of the enforcer's DRA driver, rendered by kustomize, valid
against the newest Kubernetes schema at hand, selecting exactly the driver's devices."""

from __future__ import annotations

from pathlib import Path

import kubernetes_validate

from resource_contract.dra_config import DRA_DRIVER
from tests.support.manifests import kustomize

ROOT = Path(__file__).resolve().parents[2]


def test_the_device_class_selects_the_drivers_devices() -> None:
    (device_class,) = kustomize(ROOT / "deploy" / "dra")
    assert (device_class["apiVersion"], device_class["kind"]) == (
        "resource.k8s.io/v1",
        "DeviceClass",
    )
    assert device_class["metadata"]["name"] == DRA_DRIVER
    assert device_class["spec"]["selectors"] == [
        {"cel": {"expression": f'device.driver == "{DRA_DRIVER}"'}}
    ]
    kubernetes_validate.validate(device_class, kubernetes_validate.latest_version(), strict=True)
