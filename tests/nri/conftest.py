"""The NRI plugin's end-to-end modules run once per runtime of the matrix that has NRI
(tests.support.runtimes.NRI_RELEASES: containerd 1.7, 2.1 and 2.4, CRI-O 1.34), test ids
``[containerd1.7]`` ... ``[containerd2.4]``, ``[crio1.34]``: ``nri_containerd`` is the
session's instance of each (CRI-O's is a tests.support.crio.PrivateCrio, an NriContainerd).
Tests about 1.7 itself ask for ``containerd17``."""

from __future__ import annotations

import pytest

from tests.support.runtimes import NRI_RELEASES, NriContainerd, session_runtime


@pytest.fixture(scope="module", params=NRI_RELEASES)
def nri_containerd(request: pytest.FixtureRequest) -> NriContainerd:
    runtime = session_runtime(request, request.param)
    assert isinstance(runtime, NriContainerd)
    return runtime
