"""goresctrl's RDT configuration syntax, parsed and checked without looking at the hardware.

Everything here is pure. `parse_rdt` turns the raw `rdt:` section (already shape-checked by
pydantic) into typed allocations, and refuses what no machine could run, naming each problem's
key path. What depends on the machine (mask widths, CLOS ids, cache ids) is checked by
`enforcer.controllers.rdt.schemata` once the hardware is known.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from enforcer.controllers.rdt.values import (
    CACHE_ID_ALL,
    CACHE_TYPES,
    LEVELS,
    MAX_MBPS,
    ROOT_CLASS,
    BitMask,
    CacheAllocation,
    CacheIdAllocation,
    Level,
    MbAllocation,
    MbValue,
    ParsedClass,
    ParsedPartition,
    ParsedRdt,
    Percent,
    PercentRange,
    Problems,
    Proportion,
    is_contiguous,
)
from resource_contract.class_config import RDTConfig
from resource_contract.classes import CLASS_NAME_PATTERN
from resource_contract.config import ConfigError

_CLASS_NAME = re.compile(CLASS_NAME_PATTERN)
_PERCENT = re.compile(r"(\d+)(?:-(\d+))?%")
_BIT_LIST = re.compile(r"\d+(?:-\d+)?(?:,\d+(?:-\d+)?)*")
_ID_LIST = _BIT_LIST
_MB_VALUE = re.compile(r"(\d+)(%|MBps)")
_FIELD = {"L3": "l3Allocation", "L2": "l2Allocation"}


# -- parsing --------------------------------------------------------------------------------


_NOT_A_STRING_HINT = " (write it in quotes: YAML reads an unquoted 0xff0 as the number 4080)"


def _proportion(raw: Any, path: str, out: Problems) -> Proportion | None:
    """`"60%"`, `"50-100%"`, `"0xff0"` or `"4-11"`; None (with a problem) when malformed."""
    if not isinstance(raw, str):
        hint = _NOT_A_STRING_HINT if isinstance(raw, int) and not isinstance(raw, bool) else ""
        out.add(
            path,
            f'must be a string such as "60%", "50-100%", "0xff0" or "4-11", not {raw!r}{hint}',
        )
        return None
    text = raw.strip()
    if text.endswith("%"):
        match = _PERCENT.fullmatch(text)
        if not match:
            out.add(path, f'"{raw}" is not a percentage such as "60%" or a range such as "50-100%"')
            return None
        first, second = int(match.group(1)), match.group(2)
        if second is None:
            if not 1 <= first <= 100:
                out.add(path, f'"{raw}": a percentage must be 1-100%')
                return None
            return Percent(first, path)
        high = int(second)
        if first > high or high > 100 or high < 1:
            out.add(path, f'"{raw}": a percentage range must be LOW-HIGH% with LOW <= HIGH <= 100')
            return None
        return PercentRange(first, high, path)
    if text[:2] in ("0x", "0X"):
        try:
            bits = int(text[2:], 16)
        except ValueError:
            out.add(path, f'"{raw}" is not a hexadecimal mask such as "0xff0"')
            return None
    elif _BIT_LIST.fullmatch(text):
        bits = 0
        for part in text.split(","):
            low, _dash, upper = part.partition("-")
            first = int(low)
            last = int(upper) if upper else first
            if upper and last <= first:
                out.add(path, f'"{raw}": bit range "{part}" must go upwards, as in "4-11"')
                return None
            if last >= 64:
                out.add(path, f'"{raw}": bit {last} is beyond any cache mask (bits 0-63)')
                return None
            bits |= ((1 << (last - first + 1)) - 1) << first
    else:
        out.add(
            path,
            f'"{raw}" is not a cache allocation: use a percentage ("60%"), a range of the '
            f'partition ("50-100%"), a hex mask ("0xff0") or a bit range ("4-11")',
        )
        return None
    if bits == 0:
        out.add(path, f'"{raw}" is an empty mask')
        return None
    if not is_contiguous(bits):
        out.add(
            path,
            f'"{raw}" ({bits:#x}) is not contiguous: a cache mask must be one block of '
            "consecutive 1 bits",
        )
        return None
    return BitMask(bits, path)


def parse_id_list(key: str) -> frozenset[int] | None:
    """A cpuset-like list of cache ids ("0", "2-3", "0,2-3"); None when malformed."""
    if not _ID_LIST.fullmatch(key.strip()):
        return None
    ids: set[int] = set()
    for part in key.strip().split(","):
        low, _, high = part.partition("-")
        first, last = int(low), int(high) if high else int(low)
        if last < first:
            return None
        ids.update(range(first, last + 1))
    return frozenset(ids)


def _parse_cache_id_value(raw: Any, path: str, out: Problems) -> CacheIdAllocation | None:
    if isinstance(raw, dict):
        unknown = [k for k in raw if k not in CACHE_TYPES]
        for key in unknown:
            out.add(f"{path}.{key}", "unknown key: a cache id takes unified, code and data")
        if "unified" not in raw:
            out.add(path, "unified is required (code and data are optional, for CDP)")
            return None
        values = {k: _proportion(raw[k], f"{path}.{k}", out) for k in CACHE_TYPES if k in raw}
        if ("code" in raw) != ("data" in raw):
            out.add(path, "code and data go together: give both or neither")
            return None
        if unknown or any(v is None for v in values.values()):
            return None
        return CacheIdAllocation(values["unified"], values.get("code"), values.get("data"))  # type: ignore[arg-type]
    value = _proportion(raw, path, out)
    return CacheIdAllocation(value) if value is not None else None


def _per_id(
    raw: Mapping[Any, Any], path: str, out: Problems, parse: Any, *, require_all: bool
) -> tuple[Any, tuple[tuple[frozenset[int], Any], ...]] | None:
    """Shared by cache and MB maps: `all` plus cache id keys; ids may not be listed twice."""
    ok = True
    default = None
    if CACHE_ID_ALL in raw:
        default = parse(raw[CACHE_ID_ALL], f"{path}.{CACHE_ID_ALL}", out)
        ok = default is not None
    elif require_all:
        out.add(path, 'the "all" key is required: it applies to every cache id not listed')
        ok = False
    overrides: list[tuple[frozenset[int], Any]] = []
    seen: dict[int, str] = {}
    for key, value in raw.items():
        if key == CACHE_ID_ALL:
            continue
        sub = f"{path}.{key}"
        ids = parse_id_list(str(key)) if isinstance(key, str | int) else None
        if ids is None:
            hint = ""
            if key in CACHE_TYPES:
                hint = f" (put {{unified, code, data}} under a cache id: {{all: {{{key}: ...}}}})"
            out.add(sub, f'"{key}" is not "all" or a list of cache ids such as "0" or "2-3"{hint}')
            ok = False
            continue
        for cache_id in sorted(ids):
            if cache_id in seen:
                out.add(sub, f'cache id {cache_id} is also listed under "{seen[cache_id]}"')
                ok = False
            seen[cache_id] = str(key)
        parsed = parse(value, sub, out)
        if parsed is None:
            ok = False
        else:
            overrides.append((ids, parsed))
    if not ok:
        return None
    return default, tuple(overrides)


def _cache_allocation(raw: Any, path: str, out: Problems) -> CacheAllocation | None:
    """A whole `l2Allocation`/`l3Allocation` value; None when absent or malformed."""
    if raw is None:
        return None
    if isinstance(raw, dict):
        result = _per_id(raw, path, out, _parse_cache_id_value, require_all=True)
        if result is None:
            return None
        return CacheAllocation(result[0], result[1], path)
    value = _parse_cache_id_value(raw, path, out)
    return CacheAllocation(value, (), path) if value is not None else None


def _parse_mb_value(raw: Any, path: str, out: Problems) -> MbValue | None:
    if not isinstance(raw, list) or not raw:
        out.add(path, f'must be a list such as ["50%"] or ["50%", "1000MBps"], not {raw!r}')
        return None
    percent: int | None = None
    mbps: int | None = None
    ok = True
    for index, item in enumerate(raw):
        sub = f"{path}.{index}"
        match = _MB_VALUE.fullmatch(item.strip()) if isinstance(item, str) else None
        if not match:
            out.add(sub, f'{item!r} is not a bandwidth such as "50%" or "1000MBps"')
            ok = False
            continue
        number, unit = int(match.group(1)), match.group(2)
        if unit == "%":
            if percent is not None:
                out.add(sub, "a second percentage; give at most one % and one MBps value")
                ok = False
            elif not 1 <= number <= 100:
                out.add(sub, f'"{item}": a percentage must be 1-100%')
                ok = False
            percent = number
        else:
            if mbps is not None:
                out.add(sub, "a second MBps value; give at most one % and one MBps value")
                ok = False
            elif not 1 <= number <= MAX_MBPS:
                out.add(sub, f'"{item}": MBps must be 1-{MAX_MBPS}')
                ok = False
            mbps = number
    return MbValue(percent, mbps, path) if ok else None


def _mb_allocation(raw: Any, path: str, out: Problems) -> MbAllocation | None:
    """`mbAllocation`: a list for all cache ids, or a map of cache ids to lists."""
    if raw is None:
        return None
    if isinstance(raw, dict):
        result = _per_id(raw, path, out, _parse_mb_value, require_all=False)
        if result is None:
            return None
        # As in goresctrl, a map without "all" leaves the other cache ids unlimited.
        default = result[0] or MbValue(100, MAX_MBPS, path)
        return MbAllocation(default, result[1], path)
    value = _parse_mb_value(raw, path, out)
    return MbAllocation(value, (), path) if value is not None else None


def _parsed(parse: Any, raw: Any, path: str) -> Any:
    out = Problems()
    value = parse(raw, path, out)
    if out:
        raise ValueError("\n".join(out))
    return value


def parse_proportion(raw: Any, path: str = "value") -> Proportion:
    """One cache value; ValueError (with `path: reason` lines) when malformed."""
    return _parsed(_proportion, raw, path)


def parse_cache_allocation(raw: Any, path: str = "value") -> CacheAllocation | None:
    """A whole `l2Allocation`/`l3Allocation`; ValueError when malformed, None when absent."""
    return _parsed(_cache_allocation, raw, path)


def parse_mb_allocation(raw: Any, path: str = "value") -> MbAllocation | None:
    """A whole `mbAllocation`; ValueError when malformed, None when absent."""
    return _parsed(_mb_allocation, raw, path)


# -- cross-partition checks (shared with the hardware stage) ---------------------------------


def check_partition_shares(
    entries: Sequence[tuple[str, Proportion | None]],
    *,
    what: str,
) -> list[str]:
    """Problems among partitions' requests for one cache id and type that hold on any machine.

    `entries` is (partition path, request) per partition, in name order; `what` names the
    level, type and cache id for messages ("L3 for every cache id", "L3 code for cache id 1").
    Partitions must all give a request or none; absolute and relative requests do not mix;
    percentages add up to at most 100%; masks do not overlap.
    """
    problems: list[str] = []
    given = [(path, p) for path, p in entries if p is not None]
    if not given:
        return problems
    if len(given) != len(entries):
        have = _who(_partition_name(path) for path, _ in given)
        for path, p in entries:
            if p is None:
                problems.append(
                    f"{path}: no {what} allocation while {have} one; "
                    "give every partition one or none"
                )
        return problems
    kinds = {type(p) for _, p in given}
    if BitMask in kinds and len(kinds) > 1:
        absolute = ", ".join(_partition_name(path) for path, p in given if isinstance(p, BitMask))
        for path, p in given:
            if not isinstance(p, BitMask):
                problems.append(
                    f"{p.path or path}: {what}: percentages and masks do not mix between "
                    f"partitions (partitions {absolute} use masks)"
                )
        return problems
    if BitMask in kinds:
        taken: list[tuple[str, BitMask]] = []
        for path, p in given:
            assert isinstance(p, BitMask)
            for other_path, other in taken:
                if p.bits & other.bits:
                    problems.append(
                        f"{p.path or path}: {what}: mask {p.bits:#x} overlaps partition "
                        f"\"{_partition_name(other_path)}\"'s {other.bits:#x}; partitions' "
                        "cache shares must not overlap"
                    )
            taken.append((path, p))
        return problems
    # Ranges were refused when parsing; only plain percentages remain.
    total = sum(p.value for _, p in given if isinstance(p, Percent))
    if total > 100:
        names = ", ".join(f"{_partition_name(path)} {p}" for path, p in given)
        problems.append(
            f"rdt.partitions: {what}: partitions ask for {total}% in all ({names}), more than 100%"
        )
    return problems


def _who(names: Iterable[str]) -> str:
    listed = list(names)
    if len(listed) == 1:
        return f"partition {listed[0]} has"
    return f"partitions {', '.join(listed)} have"


def _partition_name(path: str) -> str:
    # rdt.partitions.NAME.l3Allocation... -> NAME
    parts = path.split(".")
    return parts[2] if len(parts) > 2 else path


def _cross_check_defaults(partitions: Sequence[ParsedPartition], out: Problems) -> None:
    """Partition shares on a cache id that no partition lists: the `all` values meet there."""
    for level in LEVELS:
        allocs = [(f"{p.path}.{_FIELD[level]}", p.cat[level]) for p in partitions]
        if all(a is None for _, a in allocs):
            continue
        if any(a is None for _, a in allocs):
            have = _who(_partition_name(path) for path, a in allocs if a is not None)
            for p, (_path, a) in zip(partitions, allocs, strict=True):
                if a is None:
                    out.add(
                        p.path,
                        f"no {_FIELD[level]} while {have} one; give every partition one or none",
                    )
            continue
        for kind in CACHE_TYPES:
            entries = [(path, a.default.get(kind)) for path, a in allocs if a is not None]
            label = level if kind == "unified" else f"{level} {kind}"
            for line in check_partition_shares(entries, what=f"{label} (the all value)"):
                if line not in out:
                    out.append(line)


# -- the whole section ----------------------------------------------------------------------


def _class_problems(
    name: str, path: str, partition: str, seen: dict[str, str], out: Problems
) -> None:
    if name != ROOT_CLASS and not _CLASS_NAME.fullmatch(name):
        out.add(path, f'class name "{name}" must match {CLASS_NAME_PATTERN} (or be {ROOT_CLASS})')
    if name in seen:
        out.add(
            path,
            f'class "{name}" is also defined in partition "{seen[name]}"; class names must be '
            "unique across partitions",
        )
    seen.setdefault(name, partition)


def parse_rdt(config: RDTConfig, problems: list[str] | None = None) -> ParsedRdt:
    """Parses the `rdt:` section. Problems are appended to `problems` when given; otherwise
    a ConfigError listing them is raised."""
    out = Problems()
    seen: dict[str, str] = {}
    partitions: list[ParsedPartition] = []
    for pname in sorted(config.partitions):
        part = config.partitions[pname]
        ppath = f"rdt.partitions.{pname}"
        pcat = {
            level: _cache_allocation(getattr(part, _FIELD[level]), f"{ppath}.{_FIELD[level]}", out)
            for level in LEVELS
        }
        for alloc in pcat.values():
            for prop in alloc.proportions() if alloc else ():
                if isinstance(prop, PercentRange):
                    out.add(
                        prop.path,
                        f'"{prop}" is a range: partitions take a percentage or a '
                        "mask; ranges are for classes",
                    )
        pmb = _mb_allocation(part.mbAllocation, f"{ppath}.mbAllocation", out)
        classes: list[ParsedClass] = []
        for cname, cls in part.classes.items():
            cpath = f"{ppath}.classes.{cname}"
            _class_problems(cname, cpath, pname, seen, out)
            if cls is not None and cls.kubernetes is not None:
                out.add(
                    f"{cpath}.kubernetes",
                    "goresctrl's per-class kubernetes options are not supported here; "
                    "restrict who may use a class with classAccess",
                )
            ccat: dict[Level, CacheAllocation | None] = {}
            for level in LEVELS:
                raw = getattr(cls, _FIELD[level]) if cls is not None else None
                ccat[level] = _cache_allocation(raw, f"{cpath}.{_FIELD[level]}", out)
                if raw is not None and getattr(part, _FIELD[level]) is None:
                    out.add(
                        f"{cpath}.{_FIELD[level]}",
                        f'partition "{pname}" has no {_FIELD[level]}: a class\'s allocation is a '
                        "share of its partition's",
                    )
            raw_mb = cls.mbAllocation if cls is not None else None
            cmb = _mb_allocation(raw_mb, f"{cpath}.mbAllocation", out)
            if raw_mb is not None and part.mbAllocation is None:
                out.add(
                    f"{cpath}.mbAllocation",
                    f'partition "{pname}" has no mbAllocation: a class\'s allocation is a share '
                    "of its partition's",
                )
            classes.append(ParsedClass(cname, pname, cpath, ccat, cmb))
        partitions.append(ParsedPartition(pname, ppath, pcat, pmb, tuple(classes)))
    _cross_check_defaults(partitions, out)
    optional = {
        "L2": config.options.l2.optional,
        "L3": config.options.l3.optional,
        "MB": config.options.mb.optional,
    }
    parsed = ParsedRdt(optional, tuple(partitions))
    if problems is not None:
        problems.extend(line for line in out if line not in problems)
        return parsed
    if out:
        raise ConfigError(list(out))
    return parsed


def check_rdt(config: RDTConfig | None) -> list[str]:
    """Problems of the `rdt:` section that hold on any machine (for parse_config)."""
    problems: list[str] = []
    if config is not None:
        parse_rdt(config, problems)
    return problems
