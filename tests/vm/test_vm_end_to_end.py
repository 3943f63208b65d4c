"""The relay's and the NRI plugin's end-to-end modules, a chosen subset, run inside the cgroup v2
VM on its containerd 2.x: placement (static, and topology-aware with memory nodes on a machine of
2 NUMA nodes), release and widening of the shared pool, a container gone behind the relay's back,
a cpuset changed behind it, containerd restarted under the relay, kubelet's updates, and block-I/O
classes on the VM's virtio disk. Their assertions read the VM's cgroup v2 files
(tests/support/cgroupfs.py: ``cpuset.cpus``, ``io.max``, ``cgroup.threads`` in the unified
tree). With them, tests/vm/inside/ (VM only): the block-I/O controller on the VM's real v2 tree,
``io.max`` and ``io.bfq.weight`` with BFQ on the second virtio disk.

The modules run in one pytest session in the VM (one interpreter start and one containerd for
all: Python starts some 50 times slower under QEMU's software emulation), with
``KRE_TIMEOUT_SCALE`` stretching their deadlines; each module is then checked here from the
JUnit report: every selected case ran and passed (a skip counts as a failure: the VM has every
real component).
"""

from __future__ import annotations

import shlex
import time
import xml.etree.ElementTree as ET
from dataclasses import dataclass

import pytest

from tests.support.vm import REPO, VM, say

pytestmark = pytest.mark.vm

# module -> the cases of it that run in the VM, each on the VM's containerd 2.4 (RUNTIME). Chosen
# for what a cgroup v2 node changes and kept few: every Python start (the enforcer, its CLI) costs
# about a minute under emulation.
SUBSET: dict[str, tuple[str, ...]] = {
    "tests/e2e/test_enforcer_static.py": (
        "test_exclusive_cpu_and_shared_pool_follow_each_other",  # placement, release, widening
        "test_kubelets_update_keeps_the_pinning",  # kubelet's update; memory.max
        "test_containerd_restart_under_the_relay",  # restart
        "test_a_container_gone_behind_the_relays_back_is_released_on_relisting",  # reconcile
        "test_a_cpuset_changed_behind_the_enforcers_back_is_repaired",  # drift on v2 repaired
    ),
    "tests/e2e/test_enforcer_topology_aware.py": (
        "test_exclusive_and_shared_with_memory_pinned",  # 2 NUMA nodes: pools and memory
    ),
    "tests/e2e/test_enforcer_classes.py": ("test_blockio_class_writes_the_real_disks_throttles",),
    "tests/nri/test_nri_static.py": (
        "test_exclusive_cpu_and_shared_pool_follow_each_other",
        "test_kubelets_update_keeps_the_pinning_and_a_resize_that_does_not_fit_is_refused",
    ),
    "tests/nri/test_nri_classes.py": ("test_blockio_class_writes_the_real_disks_throttles",),
}
# Modules that exist for the VM only (tests/vm/inside: not collected on cgroup v1), all cases.
INSIDE = ("tests/vm/inside/test_blockio_v2.py", "tests/vm/inside/test_memory_qos_v2.py")
RUNTIME = "containerd2.4"
TIMEOUT_SCALE = 10
REPORT = "/tmp/kre-vm-junit.xml"


@dataclass(frozen=True)
class Case:
    module: str
    name: str
    outcome: str  # passed | failed | error | skipped
    detail: str


def _node_ids() -> list[str]:
    cases = [f"{m}::{name}[{RUNTIME}]" for m, names in SUBSET.items() for name in names]
    return cases + list(INSIDE)


def _cases(report: str) -> list[Case]:
    cases = []
    for case in ET.fromstring(report).iter("testcase"):
        module = case.get("classname", "").replace(".", "/") + ".py"
        outcome, detail = "passed", ""
        for kind in ("failure", "error", "skipped"):
            found = case.find(kind)
            if found is not None:
                outcome = {"failure": "failed"}.get(kind, kind)
                detail = (found.get("message") or "") + "\n" + (found.text or "")
                break
        cases.append(Case(module, case.get("name", ""), outcome, detail))
    return cases


@pytest.fixture(scope="module")
def inside(vm: VM) -> tuple[list[Case], str]:
    """Runs the subset in the VM once; its cases and the run's output."""
    command = (
        f"cd {shlex.quote(str(REPO))} && CI=true KRE_TIMEOUT_SCALE={TIMEOUT_SCALE} "
        "PYTHONDONTWRITEBYTECODE=1 .venv/bin/pytest -p no:cacheprovider -q -rfE "
        f"--junitxml={REPORT} {' '.join(shlex.quote(n) for n in _node_ids())} 2>&1"
    )
    start = time.monotonic()
    done = vm.exec(command, timeout=3600)
    say(f"tests/vm: the subset ran in the VM in {time.monotonic() - start:.0f} s")
    try:
        report = vm.read(REPORT)
    except Exception as e:  # the run died before writing it: show why
        pytest.fail(f"no JUnit report from the VM ({e}); its output:\n{done.stdout[-6000:]}")
    return _cases(report), done.stdout


@pytest.mark.parametrize("module", sorted([*SUBSET, *INSIDE]))
def test_module_passes_in_the_cgroup_v2_vm(inside: tuple[list[Case], str], module: str) -> None:
    cases, output = inside
    mine = [c for c in cases if c.module == module]
    assert mine, f"no case of {module} ran in the VM; its output:\n{output[-4000:]}"
    wanted = {f"{name}[{RUNTIME}]" for name in SUBSET.get(module, ())}
    assert wanted <= {c.name for c in mine}, f"missing in the VM: {wanted - {c.name for c in mine}}"
    bad = [c for c in mine if c.outcome != "passed"]
    assert not bad, "\n\n".join(f"{c.name}: {c.outcome}\n{c.detail[-3000:]}" for c in bad)
