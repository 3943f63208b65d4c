"""The two images, built with podman from Dockerfile.webhook and Dockerfile.enforcer and run.

No registry is needed: the base image is made from Debian's own packages by `.ci/base-image.sh`
(mmdebstrap, cached in /var/cache/kube-resource-enforcer) and passed as the build argument
BASE_IMAGE; the Python packages come from PyPI. The build context is the repository root, as
for a release build. Where podman or mmdebstrap is missing, or a build fails, the fixtures FAIL,
they never skip: `.ci/system-deps.sh` installs both.

Images are tagged localhost/kube-resource-enforcer/{webhook,enforcer}:test and kept after the
run (the one each replaces is removed). Build times and sizes are printed at the end of the run.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))  # img_support, whatever pytest's import mode

from img_support import BUILD_TIMEOUT, ROOT, Image, build, podman, podman_exe, sizes, timings


@pytest.fixture(scope="session")
def base_image() -> str:
    """The Debian base (built by mmdebstrap on the first run, then from the cache)."""
    podman_exe()
    started = time.monotonic()
    out = subprocess.run(
        [str(ROOT / ".ci" / "base-image.sh")],
        capture_output=True,
        text=True,
        timeout=BUILD_TIMEOUT,
        check=False,
    )
    if out.returncode != 0:
        pytest.fail(f".ci/base-image.sh failed:\n{out.stderr[-4000:]}", pytrace=False)
    timings["base image (cached after the first run)"] = time.monotonic() - started
    ref = out.stdout.strip().splitlines()[-1]
    sizes["base"] = int(podman("image", "inspect", "--format", "{{.Size}}", ref).stdout)
    return ref


@pytest.fixture(scope="session")
def webhook_image(base_image: str) -> Image:
    return build("webhook", base_image)


@pytest.fixture(scope="session")
def enforcer_image(base_image: str) -> Image:
    return build("enforcer", base_image)


@pytest.fixture(params=["webhook", "enforcer"])
def image(request: pytest.FixtureRequest) -> Image:
    return request.getfixturevalue(f"{request.param}_image")


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if not timings:
        return
    terminalreporter.section("images")
    for step, seconds in timings.items():
        terminalreporter.write_line(f"{step}: {seconds:.1f} s")
    terminalreporter.write_line(
        "sizes: " + json.dumps({k: f"{v / 1e6:.0f} MB" for k, v in sizes.items()})
    )
