"""The loopback registry critest's images are served from: Debian's docker-registry on
127.0.0.1, an image pushed with skopeo under its own path, its manifest served back."""

from __future__ import annotations

import json
import urllib.request
from pathlib import Path

import pytest

from tests.support import images
from tests.support.registry import LocalRegistry, registry_available


def test_an_image_pushed_is_served_under_its_path_on_loopback(tmp_path: Path) -> None:
    reason = registry_available() or (
        None if images.find_busybox() else "busybox-static is missing"
    )
    if reason:
        pytest.fail(reason, pytrace=False)
    archive = images.build_oci_archive(tmp_path / "b.tar", images.BUSYBOX)
    with LocalRegistry(tmp_path / "registry") as registry:
        assert registry.address.startswith("127.0.0.1:")
        registry.push(archive, images.BUSYBOX_IMAGE)
        request = urllib.request.Request(
            f"http://{registry.address}/v2/library/busybox/manifests/local",
            headers={"Accept": "application/vnd.oci.image.manifest.v1+json"},
        )
        with urllib.request.urlopen(request, timeout=10) as answer:
            manifest = json.load(answer)
    assert manifest["schemaVersion"] == 2
    assert len(manifest["layers"]) == 1
