"""The relay's end-to-end modules run once per runtime of the matrix
(tests.support.runtimes.RELEASES): the system's containerd 1.6, then 1.7, 2.1 and 2.4 and CRI-O
1.34 with NRI on and no plugin registered (issue 13: the relay keeps working on the runtimes the
NRI plugin needs; issue 24: and on today's). Test ids ``[containerd1.6]`` ... ``[containerd2.4]``,
``[crio1.34]``.

Every runtime is session-wide (tests/conftest.py), so each further pass costs the tests' own
time, not another containerd start. A module that is not about the relay keeps to 1.6 by
defining ``containerd`` itself (``return containerd16``). A runtime that is not installed fails
its pass, naming its installer.
"""

from __future__ import annotations

import pytest

from tests.support.containerd import PrivateContainerd
from tests.support.runtimes import RELEASES, session_runtime


@pytest.fixture(scope="module", params=sorted(RELEASES))
def containerd(request: pytest.FixtureRequest) -> PrivateContainerd:
    return session_runtime(request, request.param)
