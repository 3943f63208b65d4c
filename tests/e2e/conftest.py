"""The relay's end-to-end modules run once per supported runtime of the matrix
(tests.support.runtimes.SUPPORTED): containerd 1.7, 2.1 and 2.4 and CRI-O 1.34 with NRI on and no
plugin registered (issue 13: the relay keeps working on the runtimes the NRI plugin needs; issue
24: and on today's). Test ids ``[containerd1.7]`` ... ``[containerd2.4]``, ``[crio1.34]``.
containerd 1.6 (end of life) is no longer a pass of its own.

Every runtime is session-wide (tests/conftest.py), so each further pass costs the tests' own
time, not another containerd start. A module that is not about the relay keeps to 1.6 by
defining ``containerd`` itself (``return containerd16``). A runtime that is not installed fails
its pass, naming its installer.
"""

from __future__ import annotations

import pytest

from tests.support.containerd import PrivateContainerd
from tests.support.runtimes import SUPPORTED, session_runtime


@pytest.fixture(scope="module", params=sorted(SUPPORTED))
def containerd(request: pytest.FixtureRequest) -> PrivateContainerd:
    return session_runtime(request, request.param)
