"""The relay's end-to-end modules run once per runtime: ``containerd`` is the private
containerd 1.6 (the system's) and then the private containerd 1.7 with NRI on and no plugin
registered (issue 13: the relay keeps working on the runtime the NRI plugin needs).

Both runtimes are session-wide (tests/conftest.py), so the second pass costs the tests'
own time, not another containerd start. A module that is not about the relay keeps to 1.6 by
defining ``containerd`` itself (``return containerd16``). Without containerd 1.7
(``.ci/containerd17.sh`` not run) the 1.7 pass skips, and fails under ``CI=true``.
"""

from __future__ import annotations

import pytest

from tests.support.containerd import PrivateContainerd

RUNTIMES = {"containerd1.6": "containerd16", "containerd1.7": "containerd17"}


@pytest.fixture(scope="module", params=sorted(RUNTIMES))
def containerd(request: pytest.FixtureRequest) -> PrivateContainerd:
    runtime: PrivateContainerd = request.getfixturevalue(RUNTIMES[request.param])
    wanted = request.param.removeprefix("containerd") + "."
    version = runtime.version().runtime_version
    assert version.startswith(wanted), f"{request.param} runs containerd {version}"
    return runtime
