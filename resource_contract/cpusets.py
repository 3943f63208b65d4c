"""Cpuset strings ("0-3,8") validated in one place, for config, plan, both daemons and the webhook.

The Linux list format as the kernel writes it: elements separated by commas, each an id or an
inclusive range `FIRST-LAST` of ASCII decimal digits. Refused, with a message saying why:
a reversed range ("3-1"), an id above MAX_CPU_ID, digits of other scripts ("٣", which int()
and str.isdigit accept), signs, empty elements ("1,,2", "1,"), whitespace inside a number
("1 2") and any whitespace but ASCII spaces and tabs around an element or its dash, or ASCII
whitespace around the whole (a sysfs file ends with a newline). An empty text is the empty set.
"""

from __future__ import annotations

import re

# Linux's NR_CPUS is at most 8192 (CONFIG_NR_CPUS_RANGE_END with MAXSMP), so no machine has a
# CPU id above 8191; memory node ids (at most 1024 nodes) stay far below it too.
MAX_CPU_ID = 8191
# A list of every other id of the largest machine ("0,2,4,...") is about 40 KB.
MAX_TEXT = 64 << 10

_ELEMENT = re.compile(r"([0-9]+)(?:[ \t]*-[ \t]*([0-9]+))?", re.ASCII)
_AROUND = " \t\n\r"  # str.strip() alone would also take other scripts' spaces
_AROUND_ELEMENT = " \t"


class CpusetError(ValueError):
    """A cpuset string that is refused; the message quotes it and says why (`reason`)."""

    def __init__(self, text: str, reason: str) -> None:
        shown = repr(text) if len(text) <= 80 else repr(text[:80]) + "..."
        super().__init__(f"invalid CPU list {shown}: {reason}")
        self.reason = reason


def cpu_ranges(text: str) -> list[range]:
    """The ids of a cpuset string as ranges, in the order written; CpusetError saying why not."""
    if len(text) > MAX_TEXT:
        raise CpusetError(text, f"longer than {MAX_TEXT} characters")
    stripped = text.strip(_AROUND)
    if not stripped:
        return []
    out = []
    for item in stripped.split(","):
        element = item.strip(_AROUND_ELEMENT)
        if not element:
            raise CpusetError(text, "an empty element (two commas, or one at an end)")
        found = _ELEMENT.fullmatch(element)
        if found is None:
            raise CpusetError(
                text, f'{element!r} is not a CPU id or range (ASCII digits, as in "0-3,8")'
            )
        first = int(found[1])
        last = int(found[2]) if found[2] is not None else first
        for value in (first, last):
            if value > MAX_CPU_ID:
                raise CpusetError(
                    text,
                    f"{value} is above the limit {MAX_CPU_ID} (Linux supports at most "
                    f"{MAX_CPU_ID + 1} CPUs)",
                )
        if first > last:
            raise CpusetError(text, f"range {element!r} is reversed")
        out.append(range(first, last + 1))
    return out


def cpuset_problem(text: str) -> str | None:
    """Why `text` is not a cpuset string (without the text itself), or None when it is one."""
    try:
        cpu_ranges(text)
    except CpusetError as exc:
        return exc.reason
    return None
