"""The CPU-class controller on a fake sysfs laid out as the kernel documents it
(tests/support/fake_cpufreq.py).

The fake refuses, as the kernel does (EINVAL), a scaling_min_freq above the present
scaling_max_freq and a scaling_max_freq below the present scaling_min_freq, and the same for
the uncore's min_freq_khz and max_freq_khz."""

from __future__ import annotations

from pathlib import Path

from enforcer.controllers.cpu_class_sysfs import CpuClassSysfs
from resource_contract.class_config import CPUClass
from tests.support.fake_cpufreq import MACHINE, make_sysfs, read, snapshot

TURBO = CPUClass(
    minFreq=3200000,
    maxFreq=3800000,
    uncoreMinFreq=2000000,
    uncoreMaxFreq=2400000,
    disabledCstates=["C6", "C1E"],
)
ECO = CPUClass(maxFreq=1200000, uncoreMinFreq=800000, uncoreMaxFreq=1600000)


class KernelLike(CpuClassSysfs):
    """Refuses the writes the kernel refuses; records the order of the others."""

    writes: list[tuple[str, str]]

    def _write(self, rel: str, value: str) -> None:
        self.writes = getattr(self, "writes", [])
        for low, high in (
            ("scaling_min_freq", "scaling_max_freq"),
            ("min_freq_khz", "max_freq_khz"),
        ):
            lower, upper = self.root / rel.replace(high, low), self.root / rel.replace(low, high)
            if rel.endswith(low) and upper.exists() and int(value) > int(upper.read_text()):
                raise AssertionError(f"EINVAL: {rel}={value} above the maximum")
            if rel.endswith(high) and lower.exists() and int(value) < int(lower.read_text()):
                raise AssertionError(f"EINVAL: {rel}={value} below the minimum")
        self.writes.append((rel, value))
        super()._write(rel, value)


def test_a_class_writes_frequencies_uncore_and_cstates(tmp_path: Path) -> None:
    root = make_sysfs(tmp_path)
    ctl = KernelLike(root, MACHINE, {"turbo": TURBO})
    ctl.apply({0: "turbo", 4: "turbo"})
    for cpu in (0, 4):
        assert read(root, f"cpu{cpu}/cpufreq/scaling_min_freq") == "3200000"
        assert read(root, f"cpu{cpu}/cpufreq/scaling_max_freq") == "3800000"
        disabled = [read(root, f"cpu{cpu}/cpuidle/state{i}/disable") for i in range(4)]
        assert disabled == ["0", "0", "1", "1"]  # C1E and C6, found by name
    assert read(root, "cpu1/cpufreq/scaling_min_freq") == "800000"  # not in the class
    assert read(root, "intel_uncore_frequency/package_00_die_00/min_freq_khz") == "2000000"
    assert read(root, "intel_uncore_frequency/package_00_die_01/min_freq_khz") == "1200000"
    # Raising the minimum above the old maximum (3.0 GHz) needs the maximum first.
    order = [rel for rel, _ in ctl.writes if "cpu0/cpufreq" in rel]
    assert order == [
        "devices/system/cpu/cpu0/cpufreq/scaling_max_freq",
        "devices/system/cpu/cpu0/cpufreq/scaling_min_freq",
    ]


def test_cpus_leaving_a_class_get_back_exactly_what_they_had(tmp_path: Path) -> None:
    root = make_sysfs(tmp_path)
    (root / "devices/system/cpu/cpu0/cpuidle/state1/disable").write_text("1\n")  # set by hand
    before = snapshot(root)
    ctl = KernelLike(root, MACHINE, {"turbo": TURBO})
    ctl.apply({0: "turbo", 1: "turbo"})
    ctl.apply({1: "turbo"})  # CPU 0 leaves
    assert read(root, "cpu0/cpufreq/scaling_min_freq") == "800000"
    assert read(root, "cpu0/cpuidle/state1/disable") == "1"  # untouched throughout
    assert read(root, "cpu0/cpuidle/state3/disable") == "0"
    assert read(root, "cpu1/cpufreq/scaling_min_freq") == "3200000"
    ctl.restore_all()
    assert snapshot(root) == {
        k: v.strip() + "\n" if v.endswith("\n") else v for k, v in before.items()
    } or {k: v.strip() for k, v in snapshot(root).items()} == {
        k: v.strip() for k, v in before.items()
    }
    assert ctl.remembered == {}


def test_restore_all_after_a_crash_from_the_remembered_values(tmp_path: Path) -> None:
    root = make_sysfs(tmp_path)
    before = {k: v.strip() for k, v in snapshot(root).items()}
    first = KernelLike(root, MACHINE, {"turbo": TURBO, "eco": ECO})
    first.apply({0: "turbo", 2: "eco"})
    saved = dict(first.remembered)  # what the enforcer keeps with its state
    again = KernelLike(root, MACHINE, {"turbo": TURBO, "eco": ECO}, remembered=saved)
    again.restore_all()
    assert {k: v.strip() for k, v in snapshot(root).items()} == before


def test_a_die_shared_by_two_classes_gets_the_highest_minimum(tmp_path: Path) -> None:
    root = make_sysfs(tmp_path)
    ctl = KernelLike(root, MACHINE, {"turbo": TURBO, "eco": ECO})
    ctl.apply({0: "turbo", 1: "eco"})  # both in die 0
    assert read(root, "intel_uncore_frequency/package_00_die_00/min_freq_khz") == "2000000"
    ctl.apply({1: "eco"})
    assert read(root, "intel_uncore_frequency/package_00_die_00/min_freq_khz") == "800000"
    assert read(root, "intel_uncore_frequency/package_00_die_00/max_freq_khz") == "1600000"
    ctl.apply({})
    assert read(root, "intel_uncore_frequency/package_00_die_00/min_freq_khz") == "1200000"
    assert read(root, "intel_uncore_frequency/package_00_die_00/max_freq_khz") == "2400000"


def test_a_machine_without_the_files_gets_a_warning_not_a_failure(tmp_path: Path) -> None:
    root = make_sysfs(tmp_path, cpufreq=False, uncore=False)
    warnings: list[str] = []
    ctl = CpuClassSysfs(
        root,
        MACHINE,
        {"turbo": TURBO, "odd": CPUClass(disabledCstates=["C9"])},
        warn=warnings.append,
    )
    ctl.apply({0: "turbo", 1: "turbo", 2: "odd", 3: "missing"})
    assert read(root, "cpu0/cpuidle/state3/disable") == "1"  # what exists is still applied
    text = "\n".join(warnings)
    assert "scaling_min_freq" in text and "does not offer it" in text
    assert "uncore" in text and "no C-state named C9" in text and "'missing'" in text
    assert len(warnings) == len(set(warnings))  # each said once
    assert len([w for w in warnings if "scaling_min_freq" in w]) == 1
    ctl.restore_all()
    assert read(root, "cpu0/cpuidle/state3/disable") == "0"


def test_a_refused_write_is_a_warning_naming_the_file(tmp_path: Path) -> None:
    root = make_sysfs(tmp_path)
    # A path the kernel would refuse to write (here: a folder, refused even to root).
    target = root / "devices/system/cpu/cpu0/cpufreq/scaling_max_freq"
    target.unlink()
    target.mkdir()
    warnings: list[str] = []
    ctl = CpuClassSysfs(root, MACHINE, {"eco": ECO}, warn=warnings.append)
    ctl.apply({0: "eco", 1: "eco"})
    assert read(root, "cpu1/cpufreq/scaling_max_freq") == "1200000"  # the others go on
    assert any(str(target) in w for w in warnings), warnings
