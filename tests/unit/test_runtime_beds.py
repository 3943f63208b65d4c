"""The runtime matrix's pure parts: containerd 2.x's configuration (version 3), the registry
mirrors written for containerd and CRI-O, critest's image names and its report read back."""

from __future__ import annotations

import gzip
import io
import json
import re
import tarfile
import tomllib
from pathlib import Path

import pytest

from tests.support import critest, images
from tests.support.critest import (
    DEFAULT_PARALLEL,
    CritestResult,
    focus_on,
    parallel_nodes,
    parse_report,
    recheck,
    retried,
)
from tests.support.critest_images import critest_images
from tests.support.registry import UPSTREAMS, LocalRegistry, image_path
from tests.support.runtimes import RELEASES, NriContainerd, render_config_v3


def test_the_2x_config_is_version_3_with_what_this_machine_needs(tmp_path: Path) -> None:
    text = render_config_v3(
        tmp_path,
        tmp_path / "c.sock",
        "overlayfs",
        runc_binary="/usr/sbin/runc",
        registry_config=tmp_path / "hosts",
    )
    config = tomllib.loads(text)
    assert config["version"] == 3
    plugins = config["plugins"]
    runtime = plugins["io.containerd.cri.v1.runtime"]
    assert runtime["restrict_oom_score_adj"] is True
    runc = runtime["containerd"]["runtimes"]["runc"]
    assert runc["options"]["BinaryName"] == "/usr/sbin/runc"
    assert runc["options"]["SystemdCgroup"] is False
    assert runc["options"]["Root"] == str(tmp_path / "runc")
    image_service = plugins["io.containerd.cri.v1.images"]
    assert image_service["pinned_images"]["sandbox"] == images.PAUSE_IMAGE
    assert image_service["registry"]["config_path"] == str(tmp_path / "hosts")
    assert config["grpc"]["address"] == str(tmp_path / "c.sock")


@pytest.mark.parametrize("release", ["containerd1.7", "containerd2.1", "containerd2.4"])
def test_every_release_with_nri_gets_its_own_nri_socket(release: str, tmp_path: Path) -> None:
    ctrd = NriContainerd(tmp_path, release=release)
    ctrd.snapshotter = "native"
    config = tomllib.loads(ctrd.render())
    assert config["version"] == RELEASES[release].config_version
    nri = config["plugins"]["io.containerd.nri.v1.nri"]
    assert nri["disable"] is False
    assert nri["socket_path"] == str(tmp_path / "nri.sock")
    assert nri["plugin_request_timeout"] == "2s"


def test_every_upstream_host_is_mirrored_to_the_loopback_registry(tmp_path: Path) -> None:
    registry = LocalRegistry(tmp_path / "r")
    registry.port = 5999
    hosts = registry.containerd_hosts(tmp_path / "hosts")
    for host in UPSTREAMS:
        parsed = tomllib.loads((hosts / host / "hosts.toml").read_text())
        assert parsed["server"] == f"https://{host}"
        assert "http://127.0.0.1:5999" in parsed["host"]
    conf = tomllib.loads(registry.registries_conf(tmp_path / "registries.conf").read_text())
    by_prefix = {r["prefix"]: r for r in conf["registry"]}
    assert set(by_prefix) == set(UPSTREAMS)
    assert all(r["location"] == "127.0.0.1:5999" and r["insecure"] for r in by_prefix.values())


def test_an_image_keeps_its_path_without_its_registry_host() -> None:
    assert image_path("registry.k8s.io/e2e-test-images/busybox:1.29-2") == (
        "e2e-test-images/busybox:1.29-2"
    )
    assert image_path("docker.io/library/busybox:local") == "library/busybox:local"
    assert image_path("127.0.0.1:5000/x/y:1") == "x/y:1"
    assert image_path("library/busybox") == "library/busybox"


def test_critest_images_that_must_differ_do_and_those_that_must_not_do_not(
    tmp_path: Path,
) -> None:
    if images.find_busybox() is None:
        pytest.fail("busybox-static is needed (apt-get install busybox-static)", pytrace=False)
    specs = {s.name: s for s in critest_images()}
    staging = "gcr.io/k8s-staging-cri-tools/"

    def config_digest(name: str) -> str:
        archive = images.build_oci_archive(tmp_path / "a.tar", specs[name])
        with tarfile.open(archive) as tar:
            index = json.load(tar.extractfile("index.json"))  # type: ignore[arg-type]
            return str(index["manifests"][0]["digest"])

    different = {config_digest(f"{staging}test-image-{n}:latest") for n in (1, 2, 3)}
    assert len(different) == 3
    same = {config_digest(f"{staging}test-image-tags:{n}") for n in (1, 2, 3)}
    assert len(same) == 1
    assert config_digest("registry.k8s.io/pause:3.9") == config_digest("k8s.gcr.io/pause:3.9")
    pause_local = images.build_oci_archive(tmp_path / "p.tar", images.PAUSE)
    with tarfile.open(pause_local) as tar:
        local = json.load(tar.extractfile("index.json"))["manifests"][0]["digest"]  # type: ignore[arg-type]
    assert local != config_digest("registry.k8s.io/pause:3.9")


def test_an_image_user_and_the_user_database_it_needs(tmp_path: Path) -> None:
    if images.find_busybox() is None:
        pytest.fail("busybox-static is needed (apt-get install busybox-static)", pytrace=False)
    spec = images.ImageSpec("example.org/u:1", user="www-data")
    archive = images.build_oci_archive(tmp_path / "u.tar", spec)
    with tarfile.open(archive) as tar:
        blobs = {m.name: tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()}  # type: ignore[union-attr]
    configs = [json.loads(b) for b in blobs.values() if b.startswith(b'{"architecture"')]
    assert configs[0]["config"]["User"] == "www-data"
    layer = next(b for n, b in blobs.items() if n.startswith("blobs/") and b[:2] == b"\x1f\x8b")
    with tarfile.open(fileobj=io.BytesIO(gzip.decompress(layer))) as root:
        passwd = root.extractfile("etc/passwd").read().decode()  # type: ignore[union-attr]
        ls = root.getmember("bin/ls")
    assert "www-data:x:33:33:" in passwd
    assert ls.islnk() and ls.linkname == "bin/busybox"  # a masked applet leaves sh alone


def test_a_ginkgo_report_is_read_as_spec_names_and_states(tmp_path: Path) -> None:
    report = tmp_path / "report.json"
    report.write_text(
        json.dumps(
            [
                {
                    "SpecReports": [
                        {
                            "LeafNodeType": "It",
                            "ContainerHierarchyTexts": ["[k8s.io] Image Manager"],
                            "LeafNodeText": "should pull",
                            "State": "passed",
                        },
                        {
                            "LeafNodeType": "It",
                            "ContainerHierarchyTexts": ["[k8s.io] Streaming", "attach"],
                            "LeafNodeText": "should attach",
                            "State": "passed",
                            "NumAttempts": 2,
                        },
                        {
                            "LeafNodeType": "It",
                            "ContainerHierarchyTexts": ["[k8s.io] Streaming", "exec"],
                            "LeafNodeText": "should exec",
                            "State": "failed",
                        },
                        {"LeafNodeType": "BeforeSuite", "LeafNodeText": "", "State": "passed"},
                    ]
                }
            ]
        )
    )
    assert parse_report(report) == {
        "[k8s.io] Image Manager should pull": "passed",
        "[k8s.io] Streaming attach should attach": "passed",
        "[k8s.io] Streaming exec should exec": "failed",
    }
    # Passed at its second attempt (critest in parallel retries a failed spec once): named.
    assert retried(report) == {"[k8s.io] Streaming attach should attach"}


OOM = "[k8s.io] Container OOM runtime should terminate with exitCode 137 (OOMKilled)"
EXEC = "[k8s.io] Streaming exec should exec"


def test_a_spec_name_becomes_a_focus_that_matches_it_and_not_its_neighbours() -> None:
    focus = re.compile(focus_on({OOM, EXEC}))
    # ginkgo matches the focus against the suite's description, a space, then the spec's name.
    assert focus.search(f"CRI validation {OOM}")
    assert focus.search(f"CRI validation {EXEC}")
    # Brackets, dots and parentheses are literal: not a class, any character, a group.
    assert not focus.search("[k8s.io] Container OOM runtime should terminate with exitCode 137 X")
    assert not focus.search("k [k8sXio] Streaming exec should exec")
    assert not focus.search("[k8s.io] Streaming exec should attach")


def test_a_spec_failed_beside_others_passes_alone_or_keeps_its_failure(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # The runtime's answers, round by round: the OOM spec passes at the second alone run, the
    # exec spec never does.
    answers = iter(
        [{OOM: "failed", EXEC: "failed"}, {OOM: "passed", EXEC: "failed"}, {EXEC: "failed"}]
    )
    focuses: list[str] = []

    def alone(endpoint: str, out_dir: Path, **kw: object) -> CritestResult:
        extra = kw["extra"]
        assert isinstance(extra, tuple) and kw.get("parallel", 1) == 1
        focus = extra[0].removeprefix("--ginkgo.focus=")
        focuses.append(focus)
        states = {n: s for n, s in next(answers).items() if re.search(focus, n)}
        return CritestResult(states, messages={n: f"{n} round {len(focuses)}" for n in states})

    monkeypatch.setattr(critest, "run_critest", alone)
    result = CritestResult({OOM: "failed", EXEC: "failed", "other": "passed"})
    recheck(result, "/run/x.sock", {OOM, EXEC}, tmp_path, rounds=3)
    assert result.passed == {OOM, "other"}
    assert result.failed == {EXEC}
    assert result.rechecked == {OOM}
    assert result.messages[EXEC] == f"{EXEC} round 3"
    assert OOM not in result.messages
    # Once passed, a spec is not run again: the third round focused on the exec spec alone.
    assert len(focuses) == 3
    assert re.search(focuses[2], EXEC) and not re.search(focuses[2], OOM)


def test_critest_nodes_come_from_kre_critest_parallel_and_a_bad_value_is_named(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("KRE_CRITEST_PARALLEL", raising=False)
    assert parallel_nodes() == DEFAULT_PARALLEL
    monkeypatch.setenv("KRE_CRITEST_PARALLEL", "1")
    assert parallel_nodes() == 1
    for bad in ("0", "two", "-3", "99"):
        monkeypatch.setenv("KRE_CRITEST_PARALLEL", bad)
        with pytest.raises(ValueError, match=f"KRE_CRITEST_PARALLEL='{bad}'"):
            parallel_nodes()


def test_containerd_1_7_takes_the_registry_mirrors_in_its_version_2_config(tmp_path: Path) -> None:
    ctrd = NriContainerd(tmp_path, release="containerd1.7", registry_config=tmp_path / "hosts")
    ctrd.snapshotter = "native"
    config = tomllib.loads(ctrd.render())
    cri = config["plugins"]["io.containerd.grpc.v1.cri"]
    assert config["version"] == 2
    assert cri["registry"]["config_path"] == str(tmp_path / "hosts")
    assert cri["sandbox_image"] == images.PAUSE_IMAGE


def test_cri_o_is_a_runtime_of_the_matrix_with_its_own_nri_socket_and_registries(
    tmp_path: Path,
) -> None:
    from tests.support.crio import PrivateCrio
    from tests.support.runtimes import NRI_RELEASES, private_runtime

    release = RELEASES["crio1.34"]
    assert release.crio and release.nri and "crio1.34" in NRI_RELEASES
    assert release.fixture == "crio134" and release.installer == "tests/beds/runtimes/crio.sh"
    registry = LocalRegistry(tmp_path / "r")
    registry.port = 5999
    crio = private_runtime(release, workdir=tmp_path / "w", registry=registry)
    assert isinstance(crio, PrivateCrio) and isinstance(crio, NriContainerd)
    assert crio.nri_socket == str(tmp_path / "w" / "nri.sock")
    config = tomllib.loads(crio.render())
    assert config["crio"]["runtime"]["cgroup_manager"] == "cgroupfs"
    assert config["crio"]["nri"]["enable_nri"] is True
    assert config["crio"]["nri"]["nri_listen"] == crio.nri_socket
    # Its pulls go to the loopback registry only if crio is told where registries.conf is:
    # it reads neither /etc's nor CONTAINERS_REGISTRIES_CONF.
    command = crio.daemon_command()
    conf = command[command.index("--registries-conf") + 1]
    assert conf == str(tmp_path / "w" / "registries.conf")
    assert '"127.0.0.1:5999"' in Path(conf).read_text()
    # A containerd release is still an NriContainerd of its own.
    assert type(private_runtime("containerd2.4", workdir=tmp_path / "c")) is NriContainerd


def test_cri_o_runc_gets_no_oom_score_below_the_callers(tmp_path: Path) -> None:
    import subprocess
    import sys

    from tests.support import crio_runc

    spec = {"ociVersion": "1.0.2", "process": {"oomScoreAdj": -998, "args": ["/pause"]}}
    (tmp_path / "config.json").write_text(json.dumps(spec))
    floor = int(Path("/proc/self/oom_score_adj").read_text())
    argv = ["--root", "/r", "create", "--bundle", str(tmp_path), "--pid-file", "p", "c1"]
    assert crio_runc.bundle_of(argv) == str(tmp_path)
    assert crio_runc.bundle_of(["--root", "/r", "state", "c1"]) is None
    assert crio_runc.bundle_of(["run", "-b", "/b", "c1"]) == "/b"
    # Through the wrapper as CRI-O runs it, a stand-in runc printing its arguments.
    out = subprocess.run(
        [sys.executable, crio_runc.__file__, "/bin/echo", *argv],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert out.split() == argv
    rewritten = json.loads((tmp_path / "config.json").read_text())
    assert rewritten["process"]["oomScoreAdj"] == max(-998, floor)
    # A score at or above the floor is left as it is.
    assert not crio_runc.restrict(str(tmp_path / "config.json"), floor)
    # kubelet's hugetlb limits go where the host has no hugetlb controller, and only there.
    limits = [{"pageSize": "2MB", "limit": 0}]
    rewritten["linux"] = {"resources": {"hugepageLimits": limits, "cpu": {"cpus": "1"}}}
    (tmp_path / "config.json").write_text(json.dumps(rewritten))
    assert not crio_runc.restrict(str(tmp_path / "config.json"), floor, hugetlb=True)
    assert crio_runc.restrict(str(tmp_path / "config.json"), floor, hugetlb=False)
    assert json.loads((tmp_path / "config.json").read_text())["linux"]["resources"] == {
        "cpu": {"cpus": "1"}
    }
