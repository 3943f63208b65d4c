"""The private containerd 1.7 that the NRI tests run: the version NRI v0.6.1 comes with, its
NRI socket in its own folder, pods run on it, and it comes back after a restart."""

from __future__ import annotations

import os
import stat

from enforcer.cri import api_pb2
from tests.support.containerd17 import NriContainerd, containerd17_bin_dir
from tests.support.kubelet import KubeletEmulator
from tests.support.pods import manifest, sleeper


def test_runs_containerd_1_7_with_an_nri_socket(containerd17: NriContainerd) -> None:
    assert containerd17.version().runtime_version.startswith("1.7.")
    assert stat.S_ISSOCK(os.stat(containerd17.nri_socket).st_mode)
    assert containerd17.nri_socket.startswith(str(containerd17.workdir))
    config = containerd17.config_path.read_text()
    assert '[plugins."io.containerd.nri.v1.nri"]' in config
    assert 'plugin_request_timeout = "2s"' in config
    # Its own programs, not the system's containerd 1.6.
    assert containerd17.binary("containerd") == str(containerd17_bin_dir() / "containerd")


def test_a_pod_runs_on_it(containerd17: NriContainerd) -> None:
    with KubeletEmulator(containerd17.socket) as kubelet:
        pod = kubelet.run_pod(manifest("c17-smoke", sleeper(), namespace="nri-smoke"))
        try:
            status = kubelet.container_status(pod.container_id("app"))
            assert status.state == api_pb2.CONTAINER_RUNNING
        finally:
            kubelet.remove_pod(pod)


def test_each_runtime_with_nri_runs_a_pod(nri_containerd: NriContainerd) -> None:
    """Every runtime of the matrix that the NRI modules run on: its own programs, its NRI socket
    in its own folder, and a pod running on it."""
    release = nri_containerd.release
    assert nri_containerd.version().runtime_version.removeprefix("v").startswith(release.series)
    assert stat.S_ISSOCK(os.stat(nri_containerd.nri_socket).st_mode)
    bin_dir = release.bin_dir()
    assert bin_dir is not None
    if release.crio:
        assert nri_containerd.binary("crio") == str(bin_dir / "crio")
        assert "enable_nri = true" in nri_containerd.config_path.read_text()
    else:
        assert nri_containerd.binary("containerd") == str(bin_dir / "containerd")
        assert f"version = {release.config_version}" in nri_containerd.config_path.read_text()
    with KubeletEmulator(nri_containerd.socket) as kubelet:
        pod = kubelet.run_pod(manifest("matrix-smoke", sleeper(), namespace="nri-smoke"))
        try:
            status = kubelet.container_status(pod.container_id("app"))
            assert status.state == api_pb2.CONTAINER_RUNNING
        finally:
            kubelet.remove_pod(pod)
