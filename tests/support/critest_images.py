"""The images critest (cri-tools v1.37.0) pulls, built here from busybox-static and served from a
loopback registry under the names critest expects (tests.support.registry).

Every image is the project's busybox image (tests.support.images) with what the spec that uses
it checks: the image's USER for the user images, a label that makes the "different images" of
the image-list specs differ, and a web server (busybox ``httpd``) for the nginx and httpd
images. What cannot be rebuilt: ``test-image-digest``, which critest names by the upstream
manifest's digest (no image built here can have it).
"""

from __future__ import annotations

import os
from pathlib import Path

from tests.support.images import ImageSpec, build_default_images, build_oci_archive
from tests.support.registry import LocalRegistry

_STAGING = "gcr.io/k8s-staging-cri-tools/"
_SLEEP = ("/bin/sleep", "2147483647")
_PAUSE_39 = (("kre.test", "pause-3.9"),)
_E2E = "registry.k8s.io/e2e-test-images/"


def _web_server(port: int) -> tuple[str, ...]:
    """The image's nginx stand-in (tests.support.images): busybox httpd on ``port`` under a
    shell named nginx, with "master process" in its command line as nginx's master has."""
    return ("/usr/sbin/nginx", str(port), "master process")


_WEB_80 = _web_server(80)


def critest_images() -> list[ImageSpec]:
    """Every image critest's Linux specs pull, by the name they pull it as."""
    plain = ImageSpec
    specs = [
        plain(_E2E + "busybox:1.29-2"),
        # One image under both names, apart from the runtime's own pause:local.
        plain("registry.k8s.io/pause:3.9", cmd=_SLEEP, labels=_PAUSE_39),
        plain("k8s.gcr.io/pause:3.9", cmd=_SLEEP, labels=_PAUSE_39),
        plain(_E2E + "nginx:1.14-2", cmd=_WEB_80),
        plain(_E2E + "httpd:2.4.39-4", cmd=_WEB_80),
        plain(_E2E + "nonewprivs:1.3"),
        plain(_STAGING + "hostnet-nginx-amd64", cmd=_web_server(12003)),
        plain(_STAGING + "test-image-latest:latest", labels=(("kre.test", "latest"),)),
        plain(_STAGING + "test-image-tag:test", labels=(("kre.test", "tag"),)),
        plain(_STAGING + "test-image-tag:all", labels=(("kre.test", "tag"),)),
        plain(_STAGING + "test-image-user-uid", user="1002"),
        plain(_STAGING + "test-image-user-username", user="www-data"),
        plain(_STAGING + "test-image-user-uid-group", user="1003:1003"),
        plain(_STAGING + "test-image-user-username-group", user="www-data:www-data"),
        plain(_STAGING + "test-image-predefined-group", user="1000"),
    ]
    for n in (1, 2, 3):
        specs.append(plain(f"{_STAGING}test-image-{n}:latest", labels=(("kre.test", str(n)),)))
        specs.append(plain(f"{_STAGING}test-image-tags:{n}", labels=(("kre.test", "tags"),)))
    return specs


def _untagged(name: str) -> str:
    last = name.rsplit("/", 1)[-1]
    return name if ":" in last else name + ":latest"


def serve_critest_images(registry: LocalRegistry, folder: str | os.PathLike[str]) -> list[str]:
    """Build every critest image in ``folder`` and push it to ``registry``; the names pushed."""
    out = Path(folder)
    out.mkdir(parents=True, exist_ok=True)
    # The runtime's own pause and busybox images too: a spec that removes an image by one of
    # its names must not leave the runtime unable to pull its sandbox image again.
    pushed = []
    for name, archive in build_default_images(out / "defaults").items():
        registry.push(archive, name)
        pushed.append(name)
    for i, spec in enumerate(critest_images()):
        named = ImageSpec(_untagged(spec.name), spec.entrypoint, spec.cmd, spec.user, spec.labels)
        archive = build_oci_archive(out / f"image-{i}.oci.tar", named)
        registry.push(archive, named.name)
        pushed.append(named.name)
    return pushed
