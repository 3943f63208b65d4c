"""The relay's and the NRI plugin's end-to-end modules, a chosen subset, run inside the cgroup v2
VM on its containerd 2.x: placement (static, and topology-aware with memory nodes on a machine of
2 NUMA nodes), release and widening of the shared pool, a container gone behind the relay's back,
a cpuset changed behind it, containerd restarted under the relay, kubelet's updates, and block-I/O
classes on the VM's virtio disk. Their assertions read the VM's cgroup v2 files
(tests/support/cgroupfs.py: ``cpuset.cpus``, ``io.max``, ``cgroup.threads`` in the unified
tree). With them, tests/vm/inside/ (VM only): the block-I/O controller on the VM's real v2 tree,
``io.max`` and ``io.bfq.weight`` with BFQ on the second virtio disk.

The modules run in one pytest session in the VM (one interpreter start and one containerd for
all: Python starts some 50 times slower under QEMU's software emulation), started in the
background at the host session's start (tests.support.vm_background, which holds the subset), with
``KRE_TIMEOUT_SCALE`` stretching their deadlines; each module is then checked here from the
JUnit report: every selected case ran and passed (a skip counts as a failure: the VM has every
real component).
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from dataclasses import dataclass

import pytest

from tests.support.vm_background import INSIDE, RUNTIME, SUBSET, Background, VMBackgroundError

pytestmark = pytest.mark.vm


@dataclass(frozen=True)
class Case:
    module: str
    name: str
    outcome: str  # passed | failed | error | skipped
    detail: str


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
def inside(background: Background) -> tuple[list[Case], str]:
    """The subset's run in the VM (started in the background at the session's start: waited
    for here); its cases and the run's output."""
    try:
        report, output = background.wait_report()
    except VMBackgroundError as e:  # the run died before writing its report: show why
        pytest.fail(str(e), pytrace=False)
    return _cases(report), output


@pytest.mark.parametrize("module", sorted([*SUBSET, *INSIDE]))
def test_module_passes_in_the_cgroup_v2_vm(inside: tuple[list[Case], str], module: str) -> None:
    cases, output = inside
    mine = [c for c in cases if c.module == module]
    assert mine, f"no case of {module} ran in the VM; its output:\n{output[-4000:]}"
    wanted = {f"{name}[{RUNTIME}]" for name in SUBSET.get(module, ())}
    assert wanted <= {c.name for c in mine}, f"missing in the VM: {wanted - {c.name for c in mine}}"
    bad = [c for c in mine if c.outcome != "passed"]
    assert not bad, "\n\n".join(f"{c.name}: {c.outcome}\n{c.detail[-3000:]}" for c in bad)
