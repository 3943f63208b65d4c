"""What this machine's resctrl offers, read from its `info` folder and root `schemata`.

The kernel documents the files in Documentation/arch/x86/resctrl.rst. Cache ids come from the
root group's schemata (`L3:0=7ff;1=7ff`), as goresctrl reads them. Whether memory bandwidth is
given in MBps (the `mba_MBps` mount option) is not visible in the tree: it is read from the
mount table, or given by the caller.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from enforcer.controllers.errors import RdtUnavailable
from enforcer.controllers.rdt.values import LEVELS, Level
from resource_files.reads import read_value_file

MOUNTINFO = "/proc/self/mountinfo"


@dataclass(frozen=True)
class CatInfo:
    """One cache level's allocation (CAT) info. With CDP the kernel splits it into CODE and
    DATA resources with the same mask; their `num_closids` is already halved."""

    cbm_mask: int
    min_cbm_bits: int
    num_closids: int
    shareable_bits: int
    cdp: bool
    cache_ids: tuple[int, ...]

    @property
    def width(self) -> int:
        """Bits in the full mask (cbm_mask always starts at bit 0)."""
        return self.cbm_mask.bit_length()


@dataclass(frozen=True)
class MbInfo:
    bandwidth_gran: int
    min_bandwidth: int
    delay_linear: int
    num_closids: int
    cache_ids: tuple[int, ...]
    mbps: bool  # mounted with mba_MBps: values are MBps, not percentages


@dataclass(frozen=True)
class ResctrlInfo:
    root: Path
    cat: Mapping[Level, CatInfo]
    mb: MbInfo | None

    @property
    def num_closids(self) -> int:
        """The kernel uses the smallest num_closids of the enabled resources."""
        counts = [c.num_closids for c in self.cat.values()]
        if self.mb is not None:
            counts.append(self.mb.num_closids)
        return min(counts)


def _read(path: Path) -> str:
    try:
        return read_value_file(path).strip()
    except OSError as exc:
        raise RdtUnavailable(f"cannot read {path}: {exc.strerror}") from None


def _int(path: Path, base: int = 10) -> int:
    text = _read(path)
    try:
        return int(text, base)
    except ValueError:
        raise RdtUnavailable(f"{path}: unexpected content {text!r}") from None


def root_schemata_ids(text: str) -> dict[str, tuple[int, ...]]:
    """Resource name -> cache ids, from a schemata file (names are right-aligned by the kernel)."""
    ids: dict[str, tuple[int, ...]] = {}
    for line in text.splitlines():
        name, sep, rest = line.strip().partition(":")
        if not sep:
            continue
        found = []
        for item in rest.split(";"):
            key, eq, _ = item.strip().partition("=")
            if eq and key.strip().isdigit():
                found.append(int(key))
        ids[name.strip()] = tuple(sorted(found))
    return ids


def _cat_info(info: Path, level: Level, ids: Mapping[str, tuple[int, ...]]) -> CatInfo | None:
    unified = info / level
    code, data = info / f"{level}CODE", info / f"{level}DATA"
    names: list[str]
    if unified.is_dir():
        folder, cdp, names = unified, False, [level]
    elif code.is_dir() and data.is_dir():
        folder, cdp, names = code, True, [f"{level}CODE", f"{level}DATA"]
    else:
        return None
    cache_ids = next((ids[n] for n in names if ids.get(n)), ())
    if not cache_ids:
        raise RdtUnavailable(f"{info.parent}/schemata has no {names[0]} line with cache ids")
    return CatInfo(
        cbm_mask=_int(folder / "cbm_mask", 16),
        min_cbm_bits=_int(folder / "min_cbm_bits"),
        num_closids=_int(folder / "num_closids"),
        shareable_bits=_int(folder / "shareable_bits", 16),
        cdp=cdp,
        cache_ids=cache_ids,
    )


def mount_options(root: str | os.PathLike[str], mountinfo: str = MOUNTINFO) -> set[str] | None:
    """Options of the resctrl filesystem mounted at `root`; None when none is mounted there."""
    target = os.path.realpath(root)
    try:
        lines = Path(mountinfo).read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        fields = line.split()
        if " - " not in line or len(fields) < 6:
            continue
        after = line.split(" - ", 1)[1].split()
        if after and after[0] == "resctrl" and fields[4] == target:
            options = set(fields[5].split(","))
            if len(after) > 2:
                options.update(after[2].split(","))
            return options
    return None


def read_resctrl_info(
    root: str | os.PathLike[str] = "/sys/fs/resctrl",
    *,
    options: Iterable[str] | None = None,
) -> ResctrlInfo:
    """Reads the hardware's RDT allocation features. `options` stands for the mount options
    (for a tree that is not a mount, such as a test fixture); by default they are looked up.

    Raises RdtUnavailable when resctrl is not mounted there or offers no allocation.
    """
    base = Path(root)
    info = base / "info"
    if not info.is_dir():
        raise RdtUnavailable(
            f"RDT is not available: no resctrl filesystem is mounted at {base} ({info} is missing)"
        )
    ids = root_schemata_ids(_read(base / "schemata"))
    cat = {level: c for level in LEVELS if (c := _cat_info(info, level, ids)) is not None}
    mb = None
    if (info / "MB").is_dir():
        if options is None:
            options = mount_options(base) or set()
        mb_ids = ids.get("MB", ())
        if not mb_ids:
            raise RdtUnavailable(f"{base}/schemata has no MB line with cache ids")
        mb = MbInfo(
            bandwidth_gran=_int(info / "MB" / "bandwidth_gran"),
            min_bandwidth=_int(info / "MB" / "min_bandwidth"),
            delay_linear=_int(info / "MB" / "delay_linear"),
            num_closids=_int(info / "MB" / "num_closids"),
            cache_ids=mb_ids,
            # mba_MBps_event=... (newer kernels) also turns the software controller on.
            mbps=any(o == "mba_MBps" or o.startswith("mba_MBps_event=") for o in options),
        )
    if not cat and mb is None:
        raise RdtUnavailable(
            f"RDT allocation is not available: resctrl at {base} offers no cache or memory "
            "bandwidth allocation (monitoring only)"
        )
    return ResctrlInfo(base, cat, mb)
