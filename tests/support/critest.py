"""critest (cri-tools v1.37.0, built by tests/beds/runtimes/critest.sh) run against a CRI socket,
its result read from ginkgo's JSON report: the set of specs that passed, failed and were skipped.

``SKIPS`` are the specs that cannot run on this machine, each with the reason; they are passed
to critest as ``--ginkgo.skip`` (a spec skipped is neither a pass nor a failure).
``with_cni`` gives a private containerd the bridge network critest's pods need (Debian's CNI
plugins, from podman's dependencies, in ``/usr/lib/cni``).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from tests.support.host_cleanup import unmount_under
from tests.support.runtimes import DEFAULT_CACHE, REPO, _cache

CNI_PLUGINS = Path("/usr/lib/cni")

# Spec name (a regular expression on "Container ... It text") -> why it cannot run here.
SKIPS: dict[str, str] = {
    r"public image with digest should be pulled and removed": (
        "critest names test-image-digest by the upstream manifest's sha256; no image built "
        "here can have that digest, and the upstream registry is not reachable"
    ),
    r"[Aa]pp[Aa]rmor|apparmor_profile|SELinux|selinux": (
        "no AppArmor or SELinux on this machine, and the runtimes are configured without them"
    ),
    r"should support MaskedPaths": (
        "Debian's busybox-static runs ls inside its shell (a standalone shell), so the masked "
        "/bin/ls is never executed; the upstream busybox image's shell executes it"
    ),
    r"NoNewPrivs": (
        "the nonewprivs image's setuid-root helper is a compiled program of its own; the images "
        "here hold busybox-static only, whose applets drop a setuid bit"
    ),
}


# Runtime -> spec (a regular expression, as in SKIPS) -> why it is not run on that runtime here:
# a spec that fails on the runtime itself only after a long wait.
RUNTIME_SKIPS: dict[str, dict[str, str]] = {
    "crio1.34": {
        r"should support port mapping with host port and container port": (
            "critest dials the host port on 127.0.0.1 for 60 s, each way; CRI-O's own host-port "
            "rules (nftables, not the CNI portmap plugin containerd uses) do not answer there "
            "on this machine"
        ),
    },
}


# critest opens two gRPC connections (runtime and image service) for every spec and closes none
# until it exits; the relay serves at most 128 connections at once (enforcer/relay/h2/
# downstream.py, a bound against floods: docs/security.md) and refuses more. kubelet holds a
# few. So critest runs in groups of specs, each group its own process, directly and through the
# relay alike; the last group is every spec the others leave.
GROUPS: tuple[str, ...] = (
    r"\[k8s\.io\] Security Context",
    r"\[k8s\.io\] Container ",
    r"\[k8s\.io\] (PodSandbox|Networking|Streaming|Multiple Containers)",
    r"\[k8s\.io\] (Image|Idempotence)",
)


# ginkgo nodes per critest run (critest --parallel): 2, as fast as 3 on this 2-core machine with
# fewer processes (docs/testing.md, "critest through the relay"). KRE_CRITEST_PARALLEL overrides
# it (1: critest alone, no ginkgo CLI).
DEFAULT_PARALLEL = 2
# Attempts a spec gets when critest runs in parallel: containerd 2.1's HostNetwork and attach
# specs each failed once beside other specs (one side only) and pass alone.
FLAKE_ATTEMPTS = 2


def parallel_nodes() -> int:
    """critest's ``--parallel``: KRE_CRITEST_PARALLEL, else ``DEFAULT_PARALLEL``."""
    raw = os.environ.get("KRE_CRITEST_PARALLEL", "").strip()
    if not raw:
        return DEFAULT_PARALLEL
    if not raw.isdigit() or not 1 <= int(raw) <= 16:
        raise ValueError(f"KRE_CRITEST_PARALLEL={raw!r}: a number of ginkgo nodes, 1 to 16")
    return int(raw)


def critest_version() -> str:
    gomod = (REPO / "tests/beds/runtimes/critest/go.mod").read_text()
    found = re.search(r"sigs\.k8s\.io/cri-tools v(\S+)", gomod)
    assert found, "tests/beds/runtimes/critest/go.mod does not require cri-tools"
    return found.group(1)


def critest_binary() -> Path:
    return _cache() / f"critest-{critest_version()}" / "bin" / "critest"


def critest_available() -> str | None:
    """None when critest and what it needs are here, else why not."""
    if not os.access(critest_binary(), os.X_OK):
        return (
            f"no critest at {critest_binary()}; run tests/beds/runtimes/critest.sh "
            f"(make system-deps does; cache {DEFAULT_CACHE}, KRE_BEDS_CACHE moves it)"
        )
    if not os.access(critest_binary().parent / "ginkgo", os.X_OK):
        return (
            f"no ginkgo CLI beside {critest_binary()} (critest --parallel runs it); "
            "run tests/beds/runtimes/critest.sh"
        )
    missing = [p for p in ("bridge", "host-local", "loopback") if not (CNI_PLUGINS / p).exists()]
    if missing:
        return f"no CNI plugins {', '.join(missing)} in {CNI_PLUGINS}; `apt-get install podman`"
    return None


def with_cni(workdir: Path) -> str:
    """Give the private containerd in ``workdir`` (its ``cni/bin`` and ``cni/net.d``) a bridge
    network of its own; returns the bridge's name (``remove_bridge`` deletes it)."""
    tag = hashlib.sha256(str(workdir).encode()).hexdigest()
    bridge = f"kre{tag[:10]}"
    subnet = f"10.{200 + int(tag[10:12], 16) % 50}.{int(tag[12:14], 16)}.0/24"
    bins = workdir / "cni" / "bin"
    bins.mkdir(parents=True, exist_ok=True)
    for plugin in CNI_PLUGINS.iterdir():
        with contextlib.suppress(FileExistsError):
            (bins / plugin.name).symlink_to(plugin)
    conf = workdir / "cni" / "net.d"
    conf.mkdir(parents=True, exist_ok=True)
    (conf / "10-kre.conflist").write_text(
        json.dumps(
            {
                "cniVersion": "1.0.0",
                "name": f"kre-{tag[:8]}",
                "plugins": [
                    {
                        "type": "bridge",
                        "bridge": bridge,
                        "isGateway": True,
                        "ipMasq": False,
                        "ipam": {
                            "type": "host-local",
                            "ranges": [[{"subnet": subnet}]],
                            "routes": [{"dst": "0.0.0.0/0"}],
                            "dataDir": str(workdir / "cni" / "ipam"),
                        },
                    },
                    {"type": "portmap", "capabilities": {"portMappings": True}},
                ],
            }
        )
    )
    return bridge


def remove_bridge(bridge: str) -> None:
    subprocess.run(["ip", "link", "del", bridge], capture_output=True, timeout=30)


@dataclass
class CritestResult:
    """What one critest run gave: spec name -> state, and its output."""

    states: dict[str, str] = field(default_factory=dict)
    output: str = ""
    returncode: int = 0
    messages: dict[str, str] = field(default_factory=dict)  # a failed spec's first lines
    retried: set[str] = field(default_factory=set)  # passed, but not at the first attempt
    rechecked: set[str] = field(default_factory=set)  # failed in the run, passed alone after

    def named(self, state: str) -> set[str]:
        return {name for name, s in self.states.items() if s == state}

    @property
    def passed(self) -> set[str]:
        return self.named("passed")

    @property
    def failed(self) -> set[str]:
        return {n for n, s in self.states.items() if s not in ("passed", "skipped", "pending")}


def parse_report(path: Path) -> dict[str, str]:
    """ginkgo v2 JSON report -> spec name (containers and leaf text) -> state."""
    return {name: state for name, (state, _, _) in _specs(path).items()}


def failure_messages(path: Path) -> dict[str, str]:
    """ginkgo v2 JSON report -> spec name -> the start of its failure message (failed specs)."""
    return {name: message for name, (_, message, _) in _specs(path).items() if message}


def retried(path: Path) -> set[str]:
    """ginkgo v2 JSON report -> the specs that passed at a later attempt than the first."""
    return {
        name
        for name, (state, _, attempts) in _specs(path).items()
        if attempts > 1 and state == "passed"
    }


def _specs(path: Path) -> dict[str, tuple[str, str, int]]:
    specs: dict[str, tuple[str, str, int]] = {}
    for suite in json.loads(path.read_text()):
        for spec in suite.get("SpecReports") or ():
            if spec.get("LeafNodeType") != "It":
                continue
            name = " ".join([*spec.get("ContainerHierarchyTexts", ()), spec["LeafNodeText"]])
            failure = spec.get("Failure") or {}
            message = " ".join(str(failure.get("Message", "")).split())[:300]
            specs[name] = (spec["State"], message, int(spec.get("NumAttempts") or 1))
    return specs


# Times a spec that failed on one side only is run again alone (``recheck``) before that counts.
RECHECK_ROUNDS = 2


def focus_on(names: set[str]) -> str:
    """A ``--ginkgo.focus`` regular expression (Go's RE2) matching the specs ``names`` (and any
    spec whose name holds one of them)."""
    return "|".join(
        "(" + re.sub(r"([\\.+*?()|\[\]{}^$])", r"\\\1", name) + ")" for name in sorted(names)
    )


def recheck(
    result: CritestResult,
    endpoint: str,
    names: set[str],
    out_dir: Path,
    *,
    nri_socket: str | None = None,
    rounds: int = RECHECK_ROUNDS,
) -> None:
    """Run the specs ``names``, which failed in ``result``, again alone against ``endpoint`` (one
    ginkgo node, nothing beside them), up to ``rounds`` times each until it passes. A spec that
    passes replaces its failure in ``result`` and is named in ``result.rechecked``; one that
    fails every time keeps its failure, with the last message."""
    left = set(names)
    for i in range(rounds):
        if not left:
            return
        part = run_critest(
            endpoint,
            out_dir / f"recheck{i}",
            nri_socket=nri_socket,
            extra=(f"--ginkgo.focus={focus_on(left)}",),
        )
        for name in sorted(left):
            if part.states.get(name) == "passed":
                result.states[name] = "passed"
                result.messages.pop(name, None)
                result.rechecked.add(name)
                left.discard(name)
            elif name in part.messages:
                result.messages[name] = part.messages[name]


def run_critest_groups(
    endpoint: str,
    out_dir: Path,
    *,
    nri_socket: str | None = None,
    parallel: int | None = None,
    groups: tuple[str, ...] = GROUPS,
    more_skips: tuple[str, ...] = (),
) -> CritestResult:
    """Every spec but ``SKIPS`` (and ``more_skips``), in ``groups`` (one critest run each, of
    ``parallel`` ginkgo nodes, ``parallel_nodes()`` unless given); the results merged."""
    parallel = parallel_nodes() if parallel is None else parallel
    merged = CritestResult()
    for i in range(len(groups) + 1):
        if i < len(groups):
            focus, skip = (f"--ginkgo.focus={groups[i]}",), more_skips
        else:
            focus, skip = (), (*groups, *more_skips)
        part = run_critest(
            endpoint,
            out_dir / f"group{i}",
            nri_socket=nri_socket,
            extra=focus,
            more_skips=skip,
            parallel=parallel,
        )
        # Each group's report lists every spec, those outside its focus as skipped.
        for name, state in part.states.items():
            if state != "skipped" or name not in merged.states:
                merged.states[name] = state
        merged.messages.update(part.messages)
        merged.retried |= part.retried
        merged.output += part.output
        merged.returncode = max(merged.returncode, part.returncode)
    return merged


def run_critest(
    endpoint: str,
    out_dir: Path,
    *,
    images_file: Path | None = None,
    nri_socket: str | None = None,
    extra: tuple[str, ...] = (),
    more_skips: tuple[str, ...] = (),
    parallel: int = 1,
    timeout: float = 3600,
) -> CritestResult:
    """critest against ``endpoint`` (a unix socket path), every spec but ``SKIPS`` (and
    ``more_skips``); with ``nri_socket``, its NRI specs too. ``parallel`` > 1 runs critest
    ``--parallel``: it execs the ginkgo CLI built beside it (critest.sh) with that many nodes,
    ``Serial`` specs alone, and ginkgo merges the nodes' reports into one."""
    out_dir.mkdir(parents=True, exist_ok=True)
    report = out_dir / "report.json"
    cmd = [
        str(critest_binary()),
        f"--runtime-endpoint=unix://{endpoint}",
        f"--image-endpoint=unix://{endpoint}",
        f"--config={out_dir / 'crictl.yaml'}",
        "--ginkgo.skip=" + "|".join(f"({s})" for s in (*SKIPS, *more_skips)),
        f"--ginkgo.json-report={report}",
        "--ginkgo.no-color",
        "--ginkgo.seed=1",
        *extra,
    ]
    if parallel > 1:
        # Specs beside each other on a 2-core machine: a failed one gets a second attempt
        # (ginkgo's own retry; the report says how many it took, the summary names them).
        cmd += [f"--parallel={parallel}", f"--ginkgo.flake-attempts={FLAKE_ATTEMPTS}"]
    if images_file is not None:
        cmd.append(f"--test-images-file={images_file}")
    if nri_socket is not None:
        # critest's own NRI specs: a plugin of critest's on the runtime's NRI socket, driven
        # by CRI calls made through ``endpoint``.
        cmd.append(f"--nri-socket={nri_socket}")
    (out_dir / "crictl.yaml").write_text(f"runtime-endpoint: unix://{endpoint}\n")
    # critest --parallel finds ginkgo on PATH (the one beside it: the version it was built with)
    # and leaves a folder in TMPDIR for its symlink: in ``out_dir``, not in /tmp.
    env = {
        **os.environ,
        "PATH": f"{critest_binary().parent}:{os.environ.get('PATH', '')}",
        "TMPDIR": str(out_dir),
    }
    try:
        done = subprocess.run(
            cmd, capture_output=True, text=True, timeout=timeout, cwd=out_dir, check=False, env=env
        )
    finally:
        # critest's mount-propagation specs bind-mount folders in its TMPDIR and leave them
        # mounted when the container cannot be made (CRI-O here: docs/testing.md).
        unmount_under(out_dir)
    output = done.stdout + done.stderr
    (out_dir / "critest.log").write_text(output)
    if not report.exists():
        raise RuntimeError(f"critest wrote no report (exit {done.returncode}):\n{output[-3000:]}")
    return CritestResult(
        parse_report(report), output, done.returncode, failure_messages(report), retried(report)
    )
