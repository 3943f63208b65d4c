"""`resource-enforcer check-config` through the console script: exit codes and key-path lines."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.support.fake_resctrl import CacheShape, FakeResctrl, MbShape, ResctrlShape

EXE = Path(sys.executable).parent / "resource-enforcer"
Disk = tuple[str, int, int]


def check(tmp_path: Path, text: str, *args: str) -> subprocess.CompletedProcess[str]:
    path = tmp_path / "config.yaml"
    path.write_text(textwrap.dedent(text))
    return subprocess.run(
        [str(EXE), "check-config", str(path), *args],
        capture_output=True,
        text=True,
        timeout=60,
    )


GOOD = """
    rdt:
      options: {{mb: {{optional: true}}}}
      partitions:
        exclusive:
          l3Allocation: "60%"
          mbAllocation: ["100%"]
          classes:
            gold: {{}}
        shared:
          l3Allocation: "40%"
          classes:
            system/default: {{}}
            Burstable: {{l3Allocation: "50-100%"}}
    blockio:
      Classes:
        throttled:
          - Weight: 80
          - Devices: ["{disk}", "/dev/no-such-disk*"]
            ThrottleReadBps: 50M
    classAccess:
      rdt: {{gold: ["prod-*"]}}
    """


def test_a_good_file(tmp_path: Path, disk: Disk) -> None:
    done = check(tmp_path, GOOD.format(disk=disk[0]))
    assert (done.returncode, done.stdout) == (0, f"{tmp_path}/config.yaml: valid\n")
    # A glob that matches nothing here is a warning (one file serves many nodes); the checks
    # that need a machine's description are said to be skipped.
    assert done.stderr == (
        'warning: blockio.Classes.throttled.1.Devices.1: "/dev/no-such-disk*" matches no '
        "device on this machine\n"
        "note: skipped: the CPU sets (policy.reservedCPUs, policy.availableCPUs) against a "
        "machine's CPUs: give --sysfs-root DIR (/sys on the node itself)\n"
        "note: skipped: the rdt section against RDT hardware: give --resctrl-root DIR\n"
    )


def test_a_good_file_against_resctrl_hardware(
    tmp_path: Path, disk: Disk, fake_resctrl: Callable[..., FakeResctrl]
) -> None:
    fake = fake_resctrl(ResctrlShape(l3=CacheShape(cbm_mask=0xFFFFF)))
    done = check(tmp_path, GOOD.format(disk=disk[0]), "--resctrl-root", str(fake.root))
    assert done.returncode == 0, done.stdout
    assert "warning: rdt.options.mb.optional: memory bandwidth allocation is not available" in (
        done.stderr
    )


def test_syntax_problems_one_line_each(tmp_path: Path) -> None:
    done = check(
        tmp_path,
        """
        rdt:
          partitions:
            p1:
              l3Allocation: "0xf0f"
              mbAllocation: ["50%", "fast"]
              classes:
                c1: {l3Allocation: "120%"}
            p2:
              classes:
                c1: {}
        blockio:
          Classes:
            slow:
              - ThrottleReadBps: 10M
        """,
    )
    assert done.returncode == 1
    # p1's broken l3Allocation does not also make p2 "lack" one.
    assert done.stdout.splitlines() == [
        'rdt.partitions.p1.l3Allocation: "0xf0f" (0xf0f) is not contiguous: a cache mask must '
        "be one block of consecutive 1 bits",
        'rdt.partitions.p1.mbAllocation.1: \'fast\' is not a bandwidth such as "50%" or "1000MBps"',
        'rdt.partitions.p1.classes.c1.l3Allocation: "120%": a percentage must be 1-100%',
        'rdt.partitions.p2.classes.c1: class "c1" is also defined in partition "p1"; class '
        "names must be unique across partitions",
        "blockio.Classes.slow.0: ThrottleReadBps without Devices: throttling is set per device; "
        "list the devices (an entry without Devices sets only the default Weight)",
    ]


@pytest.mark.parametrize(
    ("shape", "config", "line"),
    [
        (
            ResctrlShape(l3=CacheShape(cbm_mask=0x7FF)),
            'rdt: {partitions: {p1: {l3Allocation: "0xfff"}}}',
            "rdt.partitions.p1.l3Allocation: mask 0xfff is wider than this machine's L3 cache "
            "mask 0x7ff (cbm_mask)",
        ),
        (
            ResctrlShape(l3=CacheShape(num_closids=4)),
            "rdt: {partitions: {p1: {classes: {a: {}, b: {}, c: {}, d: {}}}}}",
            "rdt.partitions: 4 classes need 4 resctrl groups besides the root group, but this "
            "machine has 4 CLOS ids (num_closids) including the root group's: at most 3 classes "
            "besides system/default",
        ),
        (
            ResctrlShape(l3=CacheShape(min_cbm_bits=4)),
            'rdt: {partitions: {p1: {l3Allocation: "0-2"}}}',
            "rdt.partitions.p1.l3Allocation: mask 0x7 has 3 bits; this machine's L3 cache needs "
            "at least 4 (min_cbm_bits)",
        ),
        (
            ResctrlShape(l3=CacheShape(), mb=MbShape()),
            'rdt: {partitions: {p1: {mbAllocation: ["1000MBps"]}}}',
            "rdt.partitions.p1.mbAllocation: no percentage: MBps values need resctrl mounted with "
            'mba_MBps, and this machine\'s is not; give a percentage (["50%", "1000MBps"] works '
            "in both modes)",
        ),
        (
            ResctrlShape(l3=CacheShape()),
            'rdt: {partitions: {p1: {l2Allocation: "50%"}}}',
            "rdt.partitions.p1.l2Allocation: L2 cache allocation is not available on this machine",
        ),
    ],
)
def test_hardware_problems(
    tmp_path: Path,
    fake_resctrl: Callable[..., FakeResctrl],
    shape: ResctrlShape,
    config: str,
    line: str,
) -> None:
    fake = fake_resctrl(shape)
    done = check(tmp_path, config, "--resctrl-root", str(fake.root))
    assert done.returncode == 1
    assert len(done.stdout.splitlines()) == 1
    assert done.stdout.startswith(line), done.stdout
    # Without the hardware the same file is valid.
    assert check(tmp_path, config).returncode == 0


def test_no_resctrl_and_bad_devices(tmp_path: Path) -> None:
    done = check(
        tmp_path,
        """
        rdt: {partitions: {p1: {classes: {gold: {}}}}}
        blockio: {Classes: {slow: [{Devices: [/dev/null], Weight: 50}]}}
        """,
        "--resctrl-root",
        str(tmp_path / "none"),
    )
    assert done.returncode == 1
    assert done.stdout.splitlines() == [
        f"--resctrl-root: RDT is not available: no resctrl filesystem is mounted at "
        f"{tmp_path}/none ({tmp_path}/none/info is missing)",
        'blockio.Classes.slow.0.Devices.0: "/dev/null" is a character device, not a block device',
    ]


def test_unreadable_file(tmp_path: Path) -> None:
    done = subprocess.run(
        [str(EXE), "check-config", str(tmp_path / "missing.yaml")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 1
    assert "cannot read" in done.stdout


@pytest.mark.parametrize("text", ["", "# nothing yet\n", "{}\n"], ids=["empty", "comments", "{}"])
def test_an_empty_file_is_a_warning_naming_the_defaults(tmp_path: Path, text: str) -> None:
    done = check(tmp_path, text)
    assert (done.returncode, done.stdout) == (0, f"{tmp_path}/config.yaml: valid\n")
    assert done.stderr.splitlines()[0] == (
        f"warning: {tmp_path}/config.yaml is empty: the defaults apply: policy none (containers "
        "keep the cpusets kubelet asks for), no reserved CPUs, no RDT or block-I/O classes, "
        "reserved namespaces kube-system, metrics on 127.0.0.1:8891"
    )


def test_schema_and_hardware_problems_in_one_run(
    tmp_path: Path,
    snapshot_roots: dict[str, Path],
    fake_resctrl: Callable[..., FakeResctrl],
) -> None:
    fake = fake_resctrl(ResctrlShape(l3=CacheShape(cbm_mask=0x7FF)))
    sysfs = snapshot_roots["sample1"]  # 16 CPUs
    done = check(
        tmp_path,
        """
        policy:
          name: static
          reservedCPUs: "0,99"
          preferSharedCPUs: maybe
        rdt: {partitions: {p1: {l3Allocation: "0xfff", classes: {gold: {}}}}}
        blockio: {Classes: {slow: [{Devices: [/dev/null], Weight: 50}]}}
        metric: {address: ":9000"}
        """,
        "--sysfs-root",
        str(sysfs),
        "--resctrl-root",
        str(fake.root),
    )
    assert done.returncode == 1
    assert done.stdout.splitlines() == [
        # the schema's ...
        "policy.preferSharedCPUs: Input should be a valid boolean",  # strict: no string read as one
        "metric: Extra inputs are not permitted",
        # ... and, on what parsed, the hardware's, controller by controller in the order they
        # are registered: the machine's CPUs, its RDT, its block devices.
        "policy.reservedCPUs: CPUs 99 are not available on this machine (available: 0-15)",
        "rdt.partitions.p1.l3Allocation: mask 0xfff is wider than this machine's L3 cache "
        "mask 0x7ff (cbm_mask)",
        'blockio.Classes.slow.0.Devices.0: "/dev/null" is a character device, not a block device',
    ]
    assert done.stderr == ""


def test_checks_left_out_are_named(tmp_path: Path, snapshot_roots: dict[str, Path]) -> None:
    sysfs = str(snapshot_roots["sample1"])
    # A section's own checks find what the schema could not (a mask's shape), beside the
    # schema's problems elsewhere.
    done = check(
        tmp_path,
        """
        policy: {reservedCPUs: [0, 1]}
        rdt: {partitions: {p1: {l3Allocation: "0xf0f"}}}
        """,
        "--sysfs-root",
        sysfs,
    )
    assert done.returncode == 1
    assert done.stdout.splitlines() == [
        'policy.reservedCPUs: must be a cpuset such as "0-1" or a CPU quantity such as 2',
        'rdt.partitions.p1.l3Allocation: "0xf0f" (0xf0f) is not contiguous: a cache mask must '
        "be one block of consecutive 1 bits",
    ]
    # What could not be checked against the machine, and why.
    assert (
        f"note: policy.reservedCPUs: not checked against {sysfs} until the problems above are "
        "fixed\n"
    ) in done.stderr
    assert "skipped: the CPU sets" not in done.stderr  # --sysfs-root was given
