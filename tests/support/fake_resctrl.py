"""A resctrl filesystem stand-in, laid out as the kernel does, for tests and demos.

`FakeResctrl(root, shape)` builds the tree a mounted resctrl shows (Documentation/arch/x86/
resctrl.rst): `info/<resource>/` files, `info/last_cmd_status`, and the root group's
`schemata`, `tasks`, `cpus`, `cpus_list`, `mode`, `size`, `mon_groups/`, `mon_data/`. It also
plays the kernel's part for the operations `ResctrlGroups` performs (it implements the
controller's `ResctrlFs`): `mkdir` populates a new group (or fails with ENOSPC when CLOS ids
run out), `rmdir` moves the group's tasks back to the root, a `schemata` write is validated and
merged like the kernel's (EINVAL with a `last_cmd_status` reason otherwise), and a `tasks` write
moves one task, failing with ESRCH for ids in `exited`.

The schemata file is printed in the kernel's format: names right-aligned to the longest, masks
zero-padded to the mask's hex width, bandwidth values right-aligned to 3 columns.
"""

from __future__ import annotations

import errno
import os
import re
import shutil
from dataclasses import dataclass, field
from pathlib import Path

MBA_MAX_MBPS = 2**32 - 1


@dataclass(frozen=True)
class CacheShape:
    """One cache level. `num_closids` is the hardware's; with CDP the kernel halves it."""

    cbm_mask: int = 0x7FF
    min_cbm_bits: int = 1
    num_closids: int = 16
    shareable_bits: int = 0
    cdp: bool = False
    cache_ids: tuple[int, ...] = (0, 1)


@dataclass(frozen=True)
class MbShape:
    min_bandwidth: int = 10
    bandwidth_gran: int = 10
    delay_linear: int = 1
    num_closids: int = 8
    cache_ids: tuple[int, ...] = (0, 1)
    mbps: bool = False  # mounted with mba_MBps


@dataclass(frozen=True)
class ResctrlShape:
    l3: CacheShape | None = field(default_factory=CacheShape)
    l2: CacheShape | None = None
    mb: MbShape | None = None
    monitoring: bool = True
    cpus: int = 4
    tasks: tuple[int, ...] = (1,)


@dataclass
class _Resource:
    name: str  # schemata name: L3, L3CODE, L3DATA, L2, ..., MB
    ids: tuple[int, ...]
    cache: CacheShape | None = None
    mb: MbShape | None = None

    @property
    def width(self) -> int:
        return (self.cache.cbm_mask.bit_length() + 3) // 4 if self.cache else 3

    def default(self) -> int:
        if self.cache:
            return self.cache.cbm_mask
        assert self.mb is not None
        return MBA_MAX_MBPS if self.mb.mbps else 100


class FakeResctrl:
    """Builds the tree under `root` and stands in for the kernel's side of it."""

    def __init__(self, root: str | os.PathLike[str], shape: ResctrlShape | None = None) -> None:
        self.root = Path(root)
        self.shape = shape or ResctrlShape()
        self.exited: set[int] = set()  # task ids whose moves fail with ESRCH
        self.resources = self._resources()
        self._build()

    # -- layout ---------------------------------------------------------------------------

    def _resources(self) -> list[_Resource]:
        out = []
        for level, cache in (("L3", self.shape.l3), ("L2", self.shape.l2)):
            if cache is None:
                continue
            names = [f"{level}CODE", f"{level}DATA"] if cache.cdp else [level]
            out.extend(_Resource(n, cache.cache_ids, cache=cache) for n in names)
        if self.shape.mb:
            out.append(_Resource("MB", self.shape.mb.cache_ids, mb=self.shape.mb))
        return out

    @property
    def mount_options(self) -> set[str]:
        options = {"rw", "relatime"}
        if self.shape.l3 and self.shape.l3.cdp:
            options.add("cdp")
        if self.shape.l2 and self.shape.l2.cdp:
            options.add("cdpl2")
        if self.shape.mb and self.shape.mb.mbps:
            options.add("mba_MBps")
        return options

    @property
    def num_closids(self) -> int:
        counts = []
        for cache in (self.shape.l3, self.shape.l2):
            if cache:
                counts.append(cache.num_closids // 2 if cache.cdp else cache.num_closids)
        if self.shape.mb:
            counts.append(self.shape.mb.num_closids)
        return min(counts) if counts else 0

    def _build(self) -> None:
        info = self.root / "info"
        info.mkdir(parents=True, exist_ok=True)
        _put(info / "last_cmd_status", "ok\n")
        for level, cache in (("L3", self.shape.l3), ("L2", self.shape.l2)):
            if cache is None:
                continue
            closids = cache.num_closids // 2 if cache.cdp else cache.num_closids
            width = cache.cbm_mask.bit_length()
            for suffix in ("CODE", "DATA") if cache.cdp else ("",):
                folder = info / f"{level}{suffix}"
                folder.mkdir(exist_ok=True)
                _put(folder / "cbm_mask", f"{cache.cbm_mask:x}\n")
                _put(folder / "min_cbm_bits", f"{cache.min_cbm_bits}\n")
                _put(folder / "num_closids", f"{closids}\n")
                _put(folder / "shareable_bits", f"{cache.shareable_bits:x}\n")
                usage = ";".join(f"{i}={'S' * width}" for i in cache.cache_ids)
                _put(folder / "bit_usage", usage + "\n")
        if self.shape.mb:
            mb = self.shape.mb
            folder = info / "MB"
            folder.mkdir(exist_ok=True)
            _put(folder / "bandwidth_gran", f"{mb.bandwidth_gran}\n")
            _put(folder / "delay_linear", f"{mb.delay_linear}\n")
            _put(folder / "min_bandwidth", f"{mb.min_bandwidth}\n")
            _put(folder / "num_closids", f"{mb.num_closids}\n")
            _put(folder / "thread_throttle_mode", "max\n")
        if self.shape.monitoring:
            folder = info / "L3_MON"
            folder.mkdir(exist_ok=True)
            _put(folder / "num_rmids", "128\n")
            _put(folder / "mon_features", "llc_occupancy\nmbm_total_bytes\nmbm_local_bytes\n")
            _put(folder / "max_threshold_occupancy", "1048576\n")
        self._populate(self.root, tasks=self.shape.tasks, cpus=self.shape.cpus)

    def _populate(self, group: Path, *, tasks: tuple[int, ...] = (), cpus: int = 0) -> None:
        group.mkdir(exist_ok=True)
        values = {r.name: {i: r.default() for i in r.ids} for r in self.resources}
        _put(group / "schemata", self._render(values))
        _put(group / "tasks", "".join(f"{t}\n" for t in tasks))
        _put(group / "cpus", f"{(1 << cpus) - 1:x}\n")
        _put(group / "cpus_list", (f"0-{cpus - 1}" if cpus > 1 else "0" if cpus else "") + "\n")
        _put(group / "mode", "shareable\n")
        _put(group / "size", self._render(values))  # sizes are not modelled: mirrors schemata
        if self.shape.monitoring:
            (group / "mon_groups").mkdir(exist_ok=True)
            ids = self.shape.l3.cache_ids if self.shape.l3 else (0,)
            for i in ids:
                data = group / "mon_data" / f"mon_L3_{i:02d}"
                data.mkdir(parents=True, exist_ok=True)
                for event in ("llc_occupancy", "mbm_total_bytes", "mbm_local_bytes"):
                    _put(data / event, "0\n")

    def _render(self, values: dict[str, dict[int, int]]) -> str:
        name_width = max((len(r.name) for r in self.resources), default=0)
        lines = []
        for r in self.resources:
            if r.cache:
                cells = [f"{i}={values[r.name][i]:0{r.width}x}" for i in r.ids]
            else:
                cells = [f"{i}={values[r.name][i]:>{r.width}}" for i in r.ids]
            lines.append(f"{r.name:>{name_width}}:" + ";".join(cells))
        return "".join(line + "\n" for line in lines)

    def _parse(self, text: str) -> dict[str, dict[int, int]]:
        values: dict[str, dict[int, int]] = {}
        by_name = {r.name: r for r in self.resources}
        for line in text.splitlines():
            name, _, rest = line.strip().partition(":")
            r = by_name[name]
            values[name] = {
                int(k): int(v, 16 if r.cache else 10)
                for k, v in (item.split("=") for item in rest.split(";"))
            }
        return values

    def groups(self) -> list[str]:
        """Control groups besides the root group."""
        return sorted(
            p.name
            for p in self.root.iterdir()
            if p.is_dir() and p.name not in ("info", "mon_groups", "mon_data")
        )

    # -- the kernel's side ----------------------------------------------------------------

    def _status(self, message: str) -> None:
        _put(self.root / "info" / "last_cmd_status", message + "\n")

    def mkdir(self, path: Path) -> None:
        path = Path(path)
        if path.parent != self.root:
            raise OSError(errno.EPERM, os.strerror(errno.EPERM), str(path))
        if path.exists():
            raise FileExistsError(errno.EEXIST, os.strerror(errno.EEXIST), str(path))
        if len(self.groups()) + 1 >= self.num_closids:
            self._status("Out of CLOSIDs")
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))
        self._status("ok")
        self._populate(path)

    def rmdir(self, path: Path) -> None:
        path = Path(path)
        if path == self.root or path.parent != self.root or not (path / "tasks").exists():
            raise OSError(errno.EPERM, os.strerror(errno.EPERM), str(path))
        moved = _read_ids(path / "tasks")
        shutil.rmtree(path)
        root_tasks = _read_ids(self.root / "tasks")
        _put(self.root / "tasks", "".join(f"{t}\n" for t in [*root_tasks, *moved]))

    def write(self, path: Path, data: str) -> None:
        path = Path(path)
        if path.name == "schemata":
            self._write_schemata(path, data)
        elif path.name == "tasks":
            self._write_task(path, data)
        else:
            with open(path, "w") as f:
                f.write(data)

    def _invalid(self, message: str, path: Path) -> OSError:
        self._status(message)
        return OSError(errno.EINVAL, os.strerror(errno.EINVAL), str(path))

    def _write_schemata(self, path: Path, data: str) -> None:
        if not data.endswith("\n"):
            raise self._invalid("schemata write must end with a newline", path)
        values = self._parse(path.read_text())
        by_name = {r.name: r for r in self.resources}
        for line in data.splitlines():
            name, sep, rest = line.strip().partition(":")
            if not sep or name not in by_name:
                raise self._invalid(f"Unknown or unsupported resource name '{name}'", path)
            r = by_name[name]
            for item in rest.split(";"):
                key, eq, raw = item.strip().partition("=")
                if not eq or not key.isdigit() or int(key) not in r.ids:
                    raise self._invalid(f"Missing '{name}' value", path)
                values[name][int(key)] = self._check_value(r, raw.strip(), path)
        self._status("ok")
        _put(path, self._render(values))

    def _check_value(self, r: _Resource, raw: str, path: Path) -> int:
        if r.cache:
            if not re.fullmatch(r"[0-9a-fA-F]+", raw):
                raise self._invalid(f"non-hex character in the mask {raw}", path)
            mask = int(raw, 16)
            if mask & ~r.cache.cbm_mask:
                raise self._invalid(f"Mask out of range: {raw}", path)
            low = mask & -mask
            if mask == 0 or (mask + low) & mask:
                raise self._invalid(f"The mask {raw} has non-consecutive 1-bits", path)
            if mask.bit_count() < r.cache.min_cbm_bits:
                raise self._invalid(f"Need at least {r.cache.min_cbm_bits} bits in the mask", path)
            return mask
        assert r.mb is not None
        if not raw.isdigit():
            raise self._invalid(f"Non-decimal digit in MB value {raw}", path)
        value = int(raw)
        if r.mb.mbps:
            return value
        if value < r.mb.min_bandwidth or value > 100:
            raise self._invalid(f"MB value {value} out of range [{r.mb.min_bandwidth},100]", path)
        gran = r.mb.bandwidth_gran
        return -(-value // gran) * gran  # rounded up to a control step

    def _write_task(self, path: Path, data: str) -> None:
        text = data.strip()
        if not text.isdigit():
            raise self._invalid(f"bad task id {text!r}", path)
        tid = int(text)
        if tid in self.exited:
            self._status(f"No task {tid}")
            raise ProcessLookupError(errno.ESRCH, os.strerror(errno.ESRCH), str(path))
        for group in [self.root, *(self.root / g for g in self.groups())]:
            ids = _read_ids(group / "tasks")
            if tid in ids and group != path.parent:
                ids.remove(tid)
                _put(group / "tasks", "".join(f"{t}\n" for t in ids))
        ids = _read_ids(path)
        if tid not in ids:
            _put(path, "".join(f"{t}\n" for t in [*ids, tid]))
        self._status("ok")


def _put(path: Path, text: str) -> None:
    path.write_text(text)


def _read_ids(path: Path) -> list[int]:
    return [int(line) for line in path.read_text().split() if line.strip()]
