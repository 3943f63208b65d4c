"""CPU classes: frequencies, uncore frequencies and C-states of CPUs, put back when they leave.

For each CPU in a class (cpuClasses in the configuration):

- cpufreq: /sys/devices/system/cpu/cpuN/cpufreq/scaling_min_freq and scaling_max_freq (kHz).
  Written in the order the kernel accepts: a new minimum above the present maximum needs the
  maximum first, and the other way round.
- intel_uncore_frequency: /sys/devices/system/cpu/intel_uncore_frequency/package_PP_die_DD/
  min_freq_khz and max_freq_khz, per die. Where the CPUs of a die are in classes that differ,
  the highest minimum and the highest maximum of those classes win (the die is shared).
- cpuidle: /sys/devices/system/cpu/cpuN/cpuidle/stateK/disable = 1 for each state whose
  `name` the class lists; the others are left as they are.

Every file's value is remembered before its first write and written back when no CPU needs the
setting any more (the CPU left the class, the class was removed) and at `restore_all` (the
enforcer stops). `remembered` is plain data, so it can be saved with the state and handed back
after a crash. A missing file (no cpufreq driver, no uncore driver, a VM) is a warning, once per
kind of file, never a failure; a write the kernel refuses is a warning naming the file.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from pathlib import Path

from enforcer.topology import Topology
from resource_contract.class_config import CPUClass
from resource_files.reads import read_value_file

log = logging.getLogger(__name__)

_CPU = "devices/system/cpu"
_UNCORE = f"{_CPU}/intel_uncore_frequency"


class CpuClassSysfs:
    def __init__(
        self,
        sysfs_root: str | Path,
        topology: Topology,
        classes: Mapping[str, CPUClass],
        *,
        remembered: Mapping[str, str] | None = None,
        warn: Callable[[str], None] = log.warning,
    ) -> None:
        self.root = Path(sysfs_root)
        self.topology = topology
        self.classes = dict(classes)
        self.warn = warn
        # sysfs path (relative to the root) -> its value before we first wrote it.
        self.remembered: dict[str, str] = dict(remembered or {})
        self.assignment: dict[int, str] = {}
        self._warned: set[str] = set()

    # -- the API ---------------------------------------------------------------------------

    def remember(self, assignment: Mapping[int, str]) -> bool:
        """Reads and keeps the values `apply(assignment)` would overwrite for the first time,
        writing nothing, so that they can be saved before any write; returns whether
        `remembered` grew."""
        before = len(self.remembered)
        self._remember(self._settings(self._wanted(assignment)))
        return len(self.remembered) != before

    def apply(self, assignment: Mapping[int, str]) -> None:
        """Brings every CPU to its class (CPU -> class name); CPUs left out get back what they
        had. A class that is not configured is a warning and treated as none."""
        wanted = self._wanted(assignment)
        self.assignment = {cpu: assignment[cpu] for cpu in wanted}
        settings = self._settings(wanted)
        stale = {rel: self.remembered[rel] for rel in self.remembered if rel not in settings}
        self._remember(settings)
        targets = {rel: v for rel, v in settings.items() if rel in self.remembered} | stale
        for rel, value in self._ordered(targets):
            self._write(rel, value)
        for rel, value in stale.items():  # nobody needs these any more
            if self._read(rel, quiet=True) in (None, value):
                del self.remembered[rel]

    def configure(self, classes: Mapping[str, CPUClass], *, write: bool = True) -> None:
        """New class definitions: the CPUs' present assignment is written again (`write`), or
        left to the next `apply` (which the caller precedes with `remember`)."""
        self.classes = dict(classes)
        if write:
            self.apply(self.assignment)

    def restore_all(self) -> None:
        """Every remembered value written back (the enforcer stops or is uninstalled)."""
        self.assignment = {}
        self.apply({})

    # -- what to write ---------------------------------------------------------------------

    def _wanted(self, assignment: Mapping[int, str]) -> dict[int, CPUClass]:
        wanted: dict[int, CPUClass] = {}
        for cpu, name in assignment.items():
            cls = self.classes.get(name)
            if cls is None:
                self._warn_once(f"class:{name}", f"CPU class {name!r} is not configured")
                continue
            if cpu in self.topology.cpus:
                wanted[cpu] = cls
        return wanted

    def _remember(self, settings: Mapping[str, str]) -> None:
        for rel in settings:
            if rel not in self.remembered:
                before = self._read(rel)
                if before is not None:  # else warned by _read: left alone
                    self.remembered[rel] = before

    def _settings(self, wanted: Mapping[int, CPUClass]) -> dict[str, str]:
        out: dict[str, str] = {}
        uncore: dict[tuple[int, int], list[CPUClass]] = {}
        for cpu, cls in sorted(wanted.items()):
            freq = f"{_CPU}/cpu{cpu}/cpufreq"
            if cls.minFreq is not None:
                out[f"{freq}/scaling_min_freq"] = str(cls.minFreq)
            if cls.maxFreq is not None:
                out[f"{freq}/scaling_max_freq"] = str(cls.maxFreq)
            if cls.disabledCstates:
                for state in self._states(cpu, cls.disabledCstates):
                    out[f"{_CPU}/cpu{cpu}/cpuidle/{state}/disable"] = "1"
            info = self.topology.cpus[cpu]
            uncore.setdefault((info.socket, info.die), []).append(cls)
        for (socket, die), classes in sorted(uncore.items()):
            folder = f"{_UNCORE}/package_{socket:02d}_die_{die:02d}"
            mins = [c.uncoreMinFreq for c in classes if c.uncoreMinFreq is not None]
            maxes = [c.uncoreMaxFreq for c in classes if c.uncoreMaxFreq is not None]
            if mins:
                out[f"{folder}/min_freq_khz"] = str(max(mins))
            if maxes:
                out[f"{folder}/max_freq_khz"] = str(max(maxes))
        return out

    def _states(self, cpu: int, names: list[str]) -> list[str]:
        folder = self.root / _CPU / f"cpu{cpu}" / "cpuidle"
        found = {}
        try:
            for state in sorted(folder.iterdir()):
                if state.name.startswith("state") and state.name[5:].isdigit():
                    name = self._read(str(state.relative_to(self.root) / "name"))
                    if name is not None:
                        found[name] = state.name
        except OSError:
            self._warn_once("cpuidle", f"no cpuidle states in {folder}: C-states are left alone")
            return []
        for name in names:
            if name not in found:
                self._warn_once(
                    f"cstate:{name}",
                    f"CPU {cpu} has no C-state named {name} (it has: "
                    f"{', '.join(found) or 'none'}); left alone",
                )
        return [found[n] for n in names if n in found]

    def _ordered(self, settings: Mapping[str, str]) -> list[tuple[str, str]]:
        """Pairs in an order the kernel accepts: for each min/max pair, the one that moves
        away from the other first."""
        pairs = []
        done: set[str] = set()
        for rel, value in sorted(settings.items()):
            if rel in done:
                continue
            other = _partner(rel)
            if other is not None and other in settings and other not in done:
                low, high = (rel, other) if _is_min(rel) else (other, rel)
                current_max = self._read(high, quiet=True)
                raising = current_max is not None and int(settings[low]) > _int(current_max)
                first = [high, low] if raising else [low, high]
                pairs += [(p, settings[p]) for p in first]
                done.update(first)
            else:
                pairs.append((rel, value))
                done.add(rel)
        return pairs

    # -- files -----------------------------------------------------------------------------

    def _read(self, rel: str, *, quiet: bool = False) -> str | None:
        try:
            return read_value_file(self.root / rel).strip()
        except OSError as exc:
            if not quiet:
                self._missing(rel, exc)
            return None

    def _write(self, rel: str, value: str) -> None:
        try:
            (self.root / rel).write_text(value)
        except OSError as exc:
            if isinstance(exc, FileNotFoundError):
                self._missing(rel, exc)
            else:
                self.warn(f"cannot write {value} to {self.root / rel}: {exc.strerror or exc}")

    def _missing(self, rel: str, exc: OSError) -> None:
        kind = "uncore" if "intel_uncore" in rel else rel.rsplit("/", 1)[-1]
        self._warn_once(
            f"missing:{kind}",
            f"{self.root / rel}: {exc.strerror or exc}: this machine does not offer it "
            f"({kind} settings of CPU classes are left alone)",
        )

    def _warn_once(self, what: str, message: str) -> None:
        if what not in self._warned:
            self._warned.add(what)
            self.warn(message)


def _is_min(rel: str) -> bool:
    return rel.endswith(("scaling_min_freq", "min_freq_khz"))


def _partner(rel: str) -> str | None:
    for low, high in (("scaling_min_freq", "scaling_max_freq"), ("min_freq_khz", "max_freq_khz")):
        if rel.endswith(low):
            return rel[: -len(low)] + high
        if rel.endswith(high):
            return rel[: -len(high)] + low
    return None


def _int(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        return 0
