"""Small Pod manifests for tests and the demo: busybox containers that sleep."""

from __future__ import annotations

from typing import Any

from tests.support.images import BUSYBOX_IMAGE


def manifest(
    name: str,
    *containers: dict[str, Any],
    init: list[dict[str, Any]] | None = None,
    namespace: str = "e2e",
    annotations: dict[str, str] | None = None,
) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": list(containers)}
    if init:
        spec["initContainers"] = init
    metadata: dict[str, Any] = {"name": name, "namespace": namespace}
    if annotations:
        metadata["annotations"] = dict(annotations)
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec}


def sleeper(name: str = "app", resources: dict[str, Any] | None = None) -> dict[str, Any]:
    container: dict[str, Any] = {"name": name, "image": BUSYBOX_IMAGE, "command": ["sleep", "3600"]}
    if resources:
        container["resources"] = resources
    return container


def guaranteed(cpu: str, memory: str = "64Mi") -> dict[str, Any]:
    return {"limits": {"cpu": cpu, "memory": memory}, "requests": {"cpu": cpu, "memory": memory}}
