"""Fault: a power cut around a CreateContainer, as the state folder is left by it.

The relay writes a CreateContainer's decision to the state journal before containerd hears
of the container, and makes it durable (fdatasync) while containerd creates it; kubelet's
answer waits for both. A process that dies keeps what it wrote (the page cache survives it:
that is the kill -9 suite). A power cut does not: the disk keeps only what was synced. Each
round creates a Guaranteed container (the holder of the one exclusive CPU) through the relay,
kills the enforcer, puts the state folder back as a power cut at that point leaves it, and
starts the enforcer again with containerd still holding the container (harsher than a reboot,
where nothing would run: kubelet starts the container it finds). Variants:

- `record lost`: cut after containerd created the container, before the fdatasync: the state
  folder as it was before the call (no trace of the decision). The enforcer must adopt the
  container from the runtime, on the CPU its spec names, and refuse that CPU to others;
- `record torn`: the same, with half of the record on the disk (blocks partly written);
- `record kept`: cut after the fdatasync, before kubelet had the answer;
- `cut mid-create`: the enforcer killed while containerd creates the container (1-10 ms into
  the call), the folder as before the call: containerd may or may not finish the container;
  kubelet, which lost the call, retries, takes the next attempt or gives up.

Then a second Guaranteed pod asks for a CPU (there is none while the holder lives), and the
usual checks run against containerd and the cgroups: no CPU held twice, none leaked, every
cgroup as decided, every running container tracked.
"""

from __future__ import annotations

import contextlib
import time
from pathlib import Path

import grpc
import pytest

from tests.faults.conftest import EnvFactory
from tests.faults.cri_calls import Reaction
from tests.faults.env import FaultEnv
from tests.faults.settings import count_id, fault_count
from tests.support.kubelet import RunningPod
from tests.support.kubelet_sends import GUARANTEED

KIND = "power-cut"
LOST, TORN, KEPT, MID_CREATE = "record lost", "record torn", "record kept", "cut mid-create"
VARIANTS = (LOST, TORN, KEPT, MID_CREATE)
FILES = ("state.json", "state.journal")
CUT_AFTER_SECONDS = (0.001, 0.010)

Disk = dict[str, bytes | None]


def read_disk(folder: Path) -> Disk:
    """The state folder's files as they are now (None: absent)."""
    disk: Disk = {}
    for name in FILES:
        try:
            disk[name] = (folder / name).read_bytes()
        except FileNotFoundError:
            disk[name] = None
    return disk


def put_back(folder: Path, disk: Disk) -> None:
    """The state folder as a power cut leaves it: these contents (the files stay the
    enforcer's own, mode 0600)."""
    for name, data in disk.items():
        path = folder / name
        if data is None:
            path.unlink(missing_ok=True)
        else:
            path.write_bytes(data)
            path.chmod(0o600)


def torn(before: Disk, after: Disk) -> Disk:
    """`before`, with half of what the journal gained since on the disk; `before` alone when
    the journal was emptied meanwhile (a durable write of the state file came between)."""
    old, new = before.get("state.journal") or b"", after.get("state.journal") or b""
    if not new.startswith(old) or len(new) <= len(old):
        return before
    return {**before, "state.journal": new[: len(old) + (len(new) - len(old)) // 2]}


def holder_free(env: FaultEnv, stage: str) -> None:
    """No Guaranteed container left, so the next one gets the exclusive CPU."""
    problems = env.node.remove_all(GUARANTEED) + env.node.catch_up()
    if problems:
        env.figures.violation("other", f"cleanup@{stage}", f"{stage}: {'; '.join(problems)}")


def cut_mid_create(env: FaultEnv, pod: RunningPod, folder: Path, disk: Disk) -> grpc.StatusCode:
    """CreateContainer sent, the enforcer killed 1-10 ms later, the folder put back; the code
    kubelet saw (OK when the answer came first)."""
    request = env.node.kubelet.create_request(pod, "app", 0)
    future = env.node.runtime.CreateContainer.future(request, timeout=15)
    time.sleep(env.rng.uniform(*CUT_AFTER_SECONDS))
    env.restart_enforcer("cut mid-create", kill=True, between=lambda: put_back(folder, disk))
    try:
        answer = future.result()
    except grpc.RpcError as exc:
        return exc.code()
    pod.containers["app"] = answer.container_id
    return grpc.StatusCode.OK


@pytest.mark.parametrize("faults", [fault_count(KIND)], ids=count_id)
def test_power_cut_around_a_create(fault_env: EnvFactory, faults: int) -> None:
    env = fault_env(KIND, faults)
    env.start_sentinels()
    folder = Path(env.enforcer.state_dir)
    order = [VARIANTS[i % len(VARIANTS)] for i in range(faults)]
    env.rng.shuffle(order)
    for i, variant in enumerate(order):
        if env.stop_injecting():
            break
        stage = f"{variant} #{i + 1}"
        holder_free(env, stage)
        time.sleep(0.3)  # the lazy writes of the removals are done: the folder is quiet
        env.figures.tries += 1
        pod = env.node.run_sandbox(env.node.manifest_for(GUARANTEED, "holder-"))
        if pod is None:
            continue
        before = read_disk(folder)
        if variant == MID_CREATE:
            code = cut_mid_create(env, pod, folder, before)
            env.figures.fault(f"{variant}, kubelet saw {code.name}")
            env.ensure_enforcer(stage)
            if code == grpc.StatusCode.OK:
                env.node.start(pod, pod.containers["app"])
            else:
                reaction = env.rng.choice(list(Reaction))
                env.node.after_failed_create(pod, 0, code, "", reaction)
        else:
            try:
                cid = env.node.create(pod, 0)
            except grpc.RpcError as exc:
                env.figures.violation(
                    "other",
                    f"create@{stage}",
                    f"{stage}: the holder's CreateContainer failed with a free CPU: "
                    f"{exc.code().name}: {exc.details()}",
                )
                continue
            after = read_disk(folder)
            disk = {LOST: before, TORN: torn(before, after), KEPT: after}[variant]
            env.restart_enforcer(stage, kill=True, between=lambda d=disk: put_back(folder, d))
            env.figures.fault(variant)
            env.ensure_enforcer(stage)
            # After the cut kubelet finds the container it asked for and starts it.
            env.node.start(pod, cid)
        # A newcomer asks for a CPU: while the holder lives there is none to give.
        with contextlib.suppress(grpc.RpcError):
            env.node.start_pod(env.node.manifest_for(GUARANTEED, "newcomer-"))
        env.node.catch_up()
        env.checker.settle(stage)
        env.checker.probe(env.node, stage, keep=False)
    env.finish()
