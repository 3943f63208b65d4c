"""`make demo`: the whole path on this machine, end to end.

A private containerd, the webhook (generated certificates, real TLS) and the enforcer in
front of containerd; example pods go through the webhook with curl, get the returned JSON
Patch applied, and run through the relay driven by the kubelet emulator. Each container's
cpuset and memory nodes are then read from its real cgroup, beside `resource-enforcer status`.
Everything is cleaned up afterwards, also on Ctrl-C.
"""

from __future__ import annotations

import base64
import contextlib
import json
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import jsonpatch

from tests.support.containerd import PrivateContainerd, containerd_available
from tests.support.enforcer_process import EnforcerProcess, console_script, free_port
from tests.support.fake_resctrl import FakeResctrl
from tests.support.kubelet import KubeletEmulator
from tests.support.pods import guaranteed, manifest, sleeper

REPO = Path(__file__).resolve().parent.parent
CERTS = REPO / "certs"


def say(text: str = "") -> None:
    print(text, flush=True)


def heading(text: str) -> None:
    say()
    say(f"== {text}")


def demo_config(path: Path) -> None:
    path.write_text(
        """\
policy:
  name: static
  reservedCPUs: "0"
rdt:
  partitions:
    all:
      l3Allocation: "100%"
      classes:
        gold: {l3Allocation: "60%"}
        bronze: {l3Allocation: "0-1"}
blockio:
  Classes:
    throttled:
      - Devices: ["/dev/vd*", "/dev/sd*", "/dev/nvme*n1"]
        ThrottleReadBps: 50M
        ThrottleWriteBps: 20M
classAccess:
  blockio:
    throttled: ["demo*"]
"""
    )


PODS = [
    manifest(
        "latency-critical",
        sleeper(resources=guaranteed("1", "64Mi")),
        namespace="demo",
        annotations={"rdtclass.resource-enforcer.dev/pod": "gold"},
    ),
    manifest(
        "batch",
        sleeper(
            resources={
                "requests": {"cpu": "250m", "memory": "32Mi"},
                "limits": {"cpu": "1", "memory": "128Mi"},
            }
        ),
        namespace="demo",
        annotations={
            "blockioclass.resource-enforcer.dev/pod": "throttled",
            "rdt.resources.beta.kubernetes.io/pod": "bronze",
        },
    ),
    manifest("best-effort", sleeper(), namespace="demo"),
    # Spoofs the resources annotation: the webhook overwrites it.
    manifest(
        "spoofer",
        sleeper(resources={"requests": {"cpu": "100m"}}),
        namespace="demo",
        annotations={
            "resource-enforcer.dev/resources": '{"containers":{"app":{"requests":'
            '{"cpu":"8"},"limits":{"cpu":"8"}}},"initContainers":{}}'
        },
    ),
]
DENIED = manifest(
    "forbidden-class",
    sleeper(),
    namespace="other",
    annotations={"blockioclass.resource-enforcer.dev/pod": "throttled"},
)


def admission_review(pod: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": str(uuid.uuid4()),
            "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "name": pod["metadata"]["name"],
            "namespace": pod["metadata"]["namespace"],
            "operation": "CREATE",
            "userInfo": {"username": "demo"},
            "object": pod,
            "dryRun": False,
        },
    }


def admit(pod: dict[str, Any], port: int, workdir: Path) -> dict[str, Any] | None:
    """POSTs the pod to the webhook with curl; returns the patched pod, or None if denied."""
    body = workdir / f"review-{pod['metadata']['name']}.json"
    body.write_text(json.dumps(admission_review(pod)))
    out = subprocess.run(
        [
            "curl",
            "-sS",
            "--fail-with-body",
            "--cacert",
            str(CERTS / "ca.crt"),
            "-H",
            "Content-Type: application/json",
            "--data-binary",
            f"@{body}",
            f"https://localhost:{port}/mutate",
        ],
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    response = json.loads(out.stdout)["response"]
    if not response["allowed"]:
        say(f"   denied: {response['status']['message']}")
        return None
    patch = json.loads(base64.b64decode(response["patch"]))
    patched = jsonpatch.apply_patch(pod, patch)
    value = patched["metadata"]["annotations"]["resource-enforcer.dev/resources"]
    say(f"   allowed; annotation {value}")
    return patched


def wait_https(port: int, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        ok = subprocess.run(
            ["curl", "-sS", "--cacert", str(CERTS / "ca.crt"), f"https://localhost:{port}/healthz"],
            capture_output=True,
            timeout=10,
        )
        if ok.returncode == 0:
            return
        time.sleep(0.2)
    raise RuntimeError(f"the webhook did not answer on port {port}")


def show_plan_instead(reason: str) -> int:
    say(f"containerd cannot run here: {reason}")
    say("Showing `resource-enforcer plan` on a recorded 4-socket server instead.")
    from tests.support.snapshots import extract_snapshots

    with tempfile.TemporaryDirectory() as tmp:
        roots = extract_snapshots(Path(tmp), ["4-socket-server-nosnc"])
        config = Path(tmp) / "config.yaml"
        demo_config(config)
        config.write_text(config.read_text().replace('reservedCPUs: "0"', "reservedCPUs: 2"))
        pods = Path(tmp) / "pods.yaml"
        pods.write_text("---\n".join(json.dumps(p) + "\n" for p in PODS))
        done = subprocess.run(
            [
                console_script("resource-enforcer"),
                "plan",
                "--config",
                str(config),
                "--sysfs-root",
                str(roots["4-socket-server-nosnc"]),
                "--pods",
                str(pods),
                "--format",
                "table",
            ],
        )
        # 2: some containers did not fit; the table shows which, as the demo means it to.
        return 0 if done.returncode == 2 else done.returncode


def cgroup_line(pod: Any, controller: str, file: str) -> str:
    try:
        return Path(pod.cgroup_path(controller, "app"), file).read_text().strip() or "-"
    except OSError as exc:
        return f"({exc.strerror})"


def rdt_group(root: Path, pod: Any) -> str:
    """The resctrl group whose tasks hold the container's threads, read back from the files."""
    try:
        threads = set(Path(pod.cgroup_path("cpuset", "app"), "tasks").read_text().split())
    except OSError:
        return "-"
    for group in sorted(p for p in root.iterdir() if (p / "tasks").exists()):
        if group != root and threads & set((group / "tasks").read_text().split()):
            return group.name
    return "(root)"


def main() -> int:
    reason = containerd_available()
    if reason:
        return show_plan_instead(reason)
    if shutil.which("curl") is None:
        say("curl is missing: apt-get install curl")
        return 1
    workdir = Path(tempfile.mkdtemp(prefix="kre-demo-"))
    with contextlib.ExitStack() as stack:
        stack.callback(shutil.rmtree, workdir, ignore_errors=True)
        heading("1. a private containerd (its own root, state and sockets)")
        containerd = stack.enter_context(PrivateContainerd())
        say(f"   containerd at {containerd.socket}")

        heading("2. the webhook, with certificates from `resource-webhook certs`")
        subprocess.run(
            [
                console_script("resource-webhook"),
                "certs",
                "--service",
                "resource-webhook",
                "--namespace",
                "resource-enforcer",
                "--out",
                str(CERTS),
            ],
            check=True,
        )
        config = workdir / "config.yaml"
        demo_config(config)
        port = free_port()
        webhook = subprocess.Popen(
            [
                console_script("resource-webhook"),
                "serve",
                "--tls-cert",
                str(CERTS / "tls.crt"),
                "--tls-key",
                str(CERTS / "tls.key"),
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
                "--config",
                str(config),
                "--log-level",
                "warning",
            ],
        )
        stack.callback(lambda: (webhook.terminate(), webhook.wait(10)))
        wait_https(port)
        say(f"   serving https://localhost:{port}/mutate")

        heading("3. the enforcer in front of containerd (static policy, CPU 0 reserved)")
        # This machine has no RDT: a folder laid out as the kernel's resctrl stands in for it.
        resctrl = FakeResctrl(workdir / "resctrl")
        say(f"   RDT: no resctrl on this machine; a stand-in resctrl tree at {resctrl.root}")
        enforcer = EnforcerProcess(
            workdir / "enforcer",
            runtime_socket=containerd.socket,
            config=str(config),
            extra_args=["--resctrl-root", str(resctrl.root)],
        )
        enforcer.start()
        stack.callback(enforcer.stop)
        say(f"   relay socket {enforcer.relay_socket}; kubelet would point at it")

        heading("4. pods through the webhook (curl over TLS) and the relay")
        kubelet = stack.enter_context(
            KubeletEmulator(enforcer.relay_socket, log_root=workdir / "pods")
        )
        running = []
        for pod in [*PODS, DENIED]:
            say(f" - {pod['metadata']['namespace']}/{pod['metadata']['name']}")
            patched = admit(pod, port, workdir)
            if patched is None:
                continue
            try:
                running.append(kubelet.run_pod(patched))
            except Exception as exc:  # shown, not fatal: the demo goes on
                say(f"   not started: {exc}")

        heading("5. what the kernel enforces, read from each container's cgroup")
        say(
            f"   {'POD':<18} {'QOS':<11} {'cpuset.cpus':<12} {'cpuset.mems':<12} "
            f"{'RDT group':<10} blkio read bps"
        )
        for pod in running:
            say(
                f"   {pod.name:<18} {pod.qos:<11} "
                f"{cgroup_line(pod, 'cpuset', 'cpuset.cpus'):<12} "
                f"{cgroup_line(pod, 'cpuset', 'cpuset.mems'):<12} "
                f"{rdt_group(resctrl.root, pod):<10} "
                f"{cgroup_line(pod, 'blkio', 'blkio.throttle.read_bps_device')}"
            )
        for name in ("gold", "bronze"):
            schemata = (resctrl.root / name / "schemata").read_text().strip()
            say(f"   resctrl group {name}: schemata {schemata}")

        heading("6. resource-enforcer status")
        out = enforcer.run_cli("status", "--state-dir", enforcer.state_dir)
        say(out.stdout + out.stderr)

        heading("7. removing the Guaranteed pod widens the shared pool, live")
        for pod in running:
            if pod.qos == "Guaranteed":
                kubelet.remove_pod(pod)
        for pod in running:
            if pod.qos != "Guaranteed":
                say(f"   {pod.name:<18} cpuset.cpus {cgroup_line(pod, 'cpuset', 'cpuset.cpus')}")
        heading("cleaning up")
    say("done: pods, enforcer, webhook and containerd are gone.")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        print("\ninterrupted; cleaned up.", file=sys.stderr)
        sys.exit(130)
