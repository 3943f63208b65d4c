"""Configuration + hardware -> each class's schemata text. Pure.

The arithmetic follows goresctrl (pkg/rdt/config.go) so that a configuration means the same
here as with goresctrl-based tools:

- Partitions share each cache. Percentages are turned into bits smallest request first (a
  request is rounded down, but never below `min_cbm_bits`; the last one takes what is left),
  then laid out from bit 0 upwards in partition name order. Masks are taken as written.
- A class's value is relative to its partition's mask: a percentage or range is a slice of
  it, a mask is shifted to its lowest bit. A class without a value gets the whole partition.
- Memory bandwidth: a class's percentage is of its partition's, raised to `min_bandwidth`
  (and, here, rounded up to `bandwidth_gran` as the kernel would); in MBps mode a class's value
  is capped at its partition's.
- Every class's schemata has a line for every resource the machine has, so a reload resets
  what a previous configuration set.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from enforcer.controllers.rdt.allocation import (
    check_partition_shares,
    parse_rdt,
)
from enforcer.controllers.rdt.hardware import CatInfo, MbInfo, ResctrlInfo
from enforcer.controllers.rdt.values import (
    CACHE_TYPES,
    LEVELS,
    MAX_MBPS,
    ROOT_CLASS,
    BitMask,
    CacheType,
    Level,
    MbValue,
    ParsedClass,
    ParsedRdt,
    Percent,
    Problems,
    Proportion,
    is_contiguous,
    lowest_bit,
)
from resource_contract.class_config import RDTConfig
from resource_contract.config import ConfigError

_FIELD = {"L3": "l3Allocation", "L2": "l2Allocation"}
_OPTION = {"L3": "l3", "L2": "l2", "MB": "mb"}

# partition -> cache id -> type -> mask (code/data only where the partition gives them)
_Bases = dict[str, dict[int, dict[CacheType, int]]]


@dataclass(frozen=True)
class RdtPlan:
    """What to write: class -> schemata text (`system/default` is the root group)."""

    schemata: Mapping[str, str]
    warnings: tuple[str, ...] = ()


def _ones(mask: int) -> int:
    return mask.bit_count()


def _split_bits(
    requests: Sequence[tuple[str, int]], width: int, min_bits: int
) -> dict[str, int] | None:
    """Relative partition requests -> masks, goresctrl's way; None when bits run out."""
    total = sum(pct for _, pct in requests)
    bits_total = total * width // 100
    available = bits_total
    grants: dict[str, int] = {}
    # Smallest first, so that small requests rounded up to min_bits still fit.
    order = sorted(requests, key=lambda r: r[1])
    for index, (name, pct) in enumerate(order):
        if available < max(min_bits, 1):
            return None
        pct_available = available * total // bits_total
        bits = max(pct * available // pct_available, min_bits)
        if bits > available or index == len(order) - 1:
            bits = available
        grants[name] = bits
        available -= bits
    masks: dict[str, int] = {}
    lsb = 0
    for name, _ in requests:  # laid out in partition name order
        masks[name] = ((1 << grants[name]) - 1) << lsb
        lsb += grants[name]
    return masks


def _resolve_partitions(parsed: ParsedRdt, level: Level, hw: CatInfo, out: Problems) -> _Bases:
    """Each partition's masks for one cache level on this machine."""
    field = _FIELD[level]
    partitions = parsed.partitions
    bases: _Bases = {
        p.name: {i: {"unified": hw.cbm_mask} for i in hw.cache_ids} for p in partitions
    }
    if any(p.cat[level] is None for p in partitions):
        return bases  # none has one (parse_rdt refused "some but not all")
    kinds: tuple[CacheType, ...] = CACHE_TYPES if hw.cdp else ("unified",)
    for cache_id in hw.cache_ids:
        for kind in kinds:
            entries: list[tuple[str, Proportion | None]] = []
            for p in partitions:
                alloc = p.cat[level]
                assert alloc is not None
                entries.append((f"{p.path}.{field}", alloc.at(cache_id).get(kind)))
            if all(e is None for _, e in entries):
                continue  # code/data fall back to unified
            label = level if kind == "unified" else f"{level} {kind}"
            what = f"{label} for cache id {cache_id}"
            shares = check_partition_shares(entries, what=what)
            if shares:
                out.extend(line for line in shares if line not in out)
                continue
            requests = [(p.name, e) for p, (_, e) in zip(partitions, entries, strict=True)]
            if isinstance(requests[0][1], BitMask):
                for name, mask in requests:
                    assert isinstance(mask, BitMask)
                    if _check_mask(mask, hw, level, out):
                        bases[name][cache_id][kind] = mask.bits
                continue
            percents = [(name, e.value) for name, e in requests if isinstance(e, Percent)]
            masks = _split_bits(percents, hw.width, hw.min_cbm_bits)
            if masks is None:
                asked = ", ".join(f"{n} {v}%" for n, v in percents)
                out.add(
                    "rdt.partitions",
                    f"{what}: the cache's {hw.width} bits cannot be split into {asked} with at "
                    f"least {hw.min_cbm_bits} bits (min_cbm_bits) each",
                )
                continue
            for name, mask_bits in masks.items():
                bases[name][cache_id][kind] = mask_bits
    return bases


def _check_mask(mask: BitMask, hw: CatInfo, level: Level, out: Problems) -> bool:
    if mask.bits & ~hw.cbm_mask:
        out.add(
            mask.path,
            f"mask {mask.bits:#x} is wider than this machine's {level} cache mask "
            f"{hw.cbm_mask:#x} (cbm_mask)",
        )
        return False
    if _ones(mask.bits) < hw.min_cbm_bits:
        out.add(
            mask.path,
            f"mask {mask.bits:#x} has {_ones(mask.bits)} bits; this machine's {level} cache needs "
            f"at least {hw.min_cbm_bits} (min_cbm_bits)",
        )
        return False
    return True


def _overlay(prop: Proportion, base: int, hw: CatInfo, level: Level, out: Problems) -> int | None:
    """A class's value on its partition's mask."""
    min_bits = hw.min_cbm_bits
    if not is_contiguous(base) or _ones(base) < min_bits:
        out.add(prop.path, f"the partition's mask {base:#x} cannot hold a class")
        return None
    base_lsb = lowest_bit(base)
    if isinstance(prop, BitMask):
        mask = prop.bits << base_lsb
        if mask | base != base:
            out.add(
                prop.path,
                f"mask {prop.bits:#x} does not fit its partition's {base:#x}: a class's mask "
                f"counts from the partition's lowest bit (here {prop.bits:#x} << {base_lsb} "
                f"= {mask:#x})",
            )
            return None
        if _ones(mask) < min_bits:
            out.add(
                prop.path,
                f"mask {prop.bits:#x} has {_ones(mask)} bits; this machine's {level} cache needs "
                f"at least {min_bits} (min_cbm_bits)",
            )
            return None
        return mask
    low, high = (1, prop.value) if isinstance(prop, Percent) else (max(prop.low, 1), prop.high)
    width = _ones(base)
    lsb = (low - 1) * width // 100
    msb = (high - 1) * width // 100
    gap = min_bits - (msb - lsb + 1)
    if gap > 0:  # widen downwards first, then upwards
        down = min(gap, lsb)
        lsb -= down
        gap -= down
        if gap > width - msb - 1:
            out.add(prop.path, f"{prop} of {base:#x} cannot have {min_bits} bits (min_cbm_bits)")
            return None
        msb += gap
    return ((1 << (msb - lsb + 1)) - 1) << (lsb + base_lsb)


def _mb_value(value: MbValue, mb: MbInfo, out: Problems) -> int | None:
    if mb.mbps:
        if value.mbps is None:
            out.add(
                value.path,
                "no MBps value: this machine's resctrl is mounted with mba_MBps, which takes "
                'bandwidth in MBps (such as ["50%", "1000MBps"])',
            )
        return value.mbps
    if value.percent is None:
        out.add(
            value.path,
            "no percentage: MBps values need resctrl mounted with mba_MBps, and this machine's "
            'is not; give a percentage (["50%", "1000MBps"] works in both modes)',
        )
    return value.percent


def _mb_bases(parsed: ParsedRdt, mb: MbInfo, out: Problems) -> dict[str, dict[int, int]]:
    full = MAX_MBPS if mb.mbps else 100
    bases: dict[str, dict[int, int]] = {}
    for p in parsed.partitions:
        bases[p.name] = {}
        for cache_id in mb.cache_ids:
            value = _mb_value(p.mb.at(cache_id), mb, out) if p.mb else full
            if value is None:
                value = full
            elif not mb.mbps:
                value = max(value, mb.min_bandwidth)
            bases[p.name][cache_id] = value
    return bases


def _mb_line(cls: ParsedClass, bases: dict[str, dict[int, int]], mb: MbInfo, out: Problems) -> str:
    values = []
    for cache_id in mb.cache_ids:
        base = bases[cls.partition][cache_id]
        asked = _mb_value(cls.mb.at(cache_id), mb, out) if cls.mb else None
        if mb.mbps:
            value = min(asked if asked is not None else MAX_MBPS, base)
        else:
            value = max((asked if asked is not None else 100) * base // 100, mb.min_bandwidth)
            # The kernel rounds up to its control steps; writing the result reads back the same.
            gran = max(mb.bandwidth_gran, 1)
            value = min(-(-value // gran) * gran, 100)
        values.append(f"{cache_id}={value}")
    return "MB:" + ";".join(values)


def _users(parsed: ParsedRdt, level: str) -> list[str]:
    """Key paths of the partitions and classes that set an allocation of `level`."""
    paths = []
    for p in parsed.partitions:
        nodes = [(p.path, p.cat, p.mb), *((c.path, c.cat, c.mb) for c in p.classes)]
        for path, cat, mb in nodes:
            if level == "MB" and mb is not None:
                paths.append(f"{path}.mbAllocation")
            elif level != "MB" and cat[level] is not None:  # type: ignore[index]
                paths.append(f"{path}.{_FIELD[level]}")
    return paths


def plan_rdt(config: RDTConfig | ParsedRdt, info: ResctrlInfo) -> RdtPlan:
    """Each class's schemata on this machine. ConfigError, one `key.path: reason` line per
    problem, when the configuration does not fit the hardware."""

    parsed = config if isinstance(config, ParsedRdt) else parse_rdt(config)
    out = Problems()
    warnings: list[str] = []
    classes = parsed.classes
    groups = [name for name in classes if name != ROOT_CLASS]
    if len(groups) > info.num_closids - 1:
        out.add(
            "rdt.partitions",
            f"{len(groups)} classes need {len(groups)} resctrl groups besides the root group, "
            f"but this machine has {info.num_closids} CLOS ids (num_closids) including the "
            f"root group's: at most {info.num_closids - 1} classes besides {ROOT_CLASS}",
        )
    cat_bases: dict[Level, _Bases] = {}
    for level in LEVELS:
        hw = info.cat.get(level)
        users = _users(parsed, level)
        if hw is None:
            _missing(level, users, parsed, info, out, warnings)
            continue
        cat_bases[level] = _resolve_partitions(parsed, level, hw, out)
    mb_bases: dict[str, dict[int, int]] = {}
    if info.mb is None:
        _missing("MB", _users(parsed, "MB"), parsed, info, out, warnings)
    else:
        mb_bases = _mb_bases(parsed, info.mb, out)
    if out:
        raise ConfigError(list(out))
    schemata: dict[str, str] = {}
    for name, cls in classes.items():
        lines: list[str] = []
        for level, bases in cat_bases.items():
            hw = info.cat[level]
            alloc = cls.cat[level]
            for kind in ("code", "data") if hw.cdp else ("unified",):
                masks = []
                for cache_id in hw.cache_ids:
                    base_masks = bases[cls.partition][cache_id]
                    base = base_masks.get(kind, base_masks["unified"])
                    mask = base
                    if alloc is not None:
                        prop = alloc.at(cache_id).effective(kind)
                        mask = _overlay(prop, base, hw, level, out) or base
                    masks.append(f"{cache_id}={mask:x}")
                suffix = "" if kind == "unified" else kind.upper()
                lines.append(f"{level}{suffix}:" + ";".join(masks))
        if info.mb is not None:
            lines.append(_mb_line(cls, mb_bases, info.mb, out))
        schemata[name] = "".join(line + "\n" for line in lines)
    if out:
        raise ConfigError(list(out))
    return RdtPlan(schemata, tuple(warnings))


def _missing(
    level: str,
    users: list[str],
    parsed: ParsedRdt,
    info: ResctrlInfo,
    out: Problems,
    warnings: list[str],
) -> None:
    if not users:
        return
    what = "memory bandwidth" if level == "MB" else f"{level} cache"
    option = f"rdt.options.{_OPTION[level]}.optional"
    if parsed.optional[level]:
        warnings.append(
            f"{option}: {what} allocation is not available on this machine; "
            f"{len(users)} setting(s) ignored"
        )
        return
    for path in users:
        out.add(
            path,
            f"{what} allocation is not available on this machine (no {info.root}/info/{level}); "
            f"set {option}: true to run without it",
        )


def default_schemata(info: ResctrlInfo) -> str:
    """Every resource at its full default (what a fresh group gets): for resetting a group."""
    lines = []
    for level, hw in info.cat.items():
        for kind in ("CODE", "DATA") if hw.cdp else ("",):
            lines.append(f"{level}{kind}:" + ";".join(f"{i}={hw.cbm_mask:x}" for i in hw.cache_ids))
    if info.mb is not None:
        full = MAX_MBPS if info.mb.mbps else 100
        lines.append("MB:" + ";".join(f"{i}={full}" for i in info.mb.cache_ids))
    return "".join(line + "\n" for line in lines)


def compute_schemata(config: RDTConfig | ParsedRdt, info: ResctrlInfo) -> dict[str, str]:
    """class -> schemata text, for this machine; ConfigError (key paths) when impossible."""
    return dict(plan_rdt(config, info).schemata)


__all__ = ["RdtPlan", "compute_schemata", "default_schemata", "plan_rdt"]
