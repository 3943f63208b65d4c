"""What the enforcer decided, as an operator reads it: `resource-enforcer status --state-dir DIR`
run as a command, its container table parsed by the header's column positions.

The table (docs/enforcer.md) has a header line starting with NAMESPACE; the CPUS column shows
what the container has, followed by `(to X)` while a re-pin to X is pending; ID shows the first
13 characters of the container id, or `pending`.
"""

from __future__ import annotations

import re
import subprocess
from dataclasses import dataclass

from enforcer.topology import CPUSet
from tests.support.enforcer_process import console_script

_PENDING = re.compile(r"^(?P<applied>\S*)\s*\(to (?P<decided>[^)]*)\)$")
_RESERVED = re.compile(r"\breserved (?P<reserved>\S+?);")


@dataclass(frozen=True)
class StatusRow:
    namespace: str
    pod: str
    container: str
    qos: str
    kind: str
    applied: CPUSet | None  # what the enforcer believes the container has
    decided: CPUSet | None  # what it should have; equal to `applied` unless a re-pin is pending
    id_prefix: str

    def matches(self, container_id: str) -> bool:
        return bool(self.id_prefix) and container_id.startswith(self.id_prefix)


@dataclass(frozen=True)
class Status:
    rows: list[StatusRow]
    reserved: CPUSet | None
    text: str

    def row_of(self, container_id: str) -> StatusRow | None:
        for row in self.rows:
            if row.matches(container_id):
                return row
        return None


class StatusError(RuntimeError):
    """`status` failed or printed something this parser cannot read."""


def read_status(state_dir: str, timeout: float = 30.0) -> Status:
    done = subprocess.run(
        [console_script("resource-enforcer"), "status", "--state-dir", state_dir],
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    if done.returncode != 0:
        raise StatusError(
            f"`resource-enforcer status --state-dir {state_dir}` exited {done.returncode}: "
            f"{(done.stderr or done.stdout).strip()[-500:]}"
        )
    return parse_status(done.stdout)


def _cpus(text: str) -> CPUSet | None:
    if text in ("", "-"):
        return None
    try:
        return CPUSet.parse(text)
    except ValueError:
        return None


def parse_status(text: str) -> Status:
    lines = text.splitlines()
    reserved = None
    for line in lines:
        if (m := _RESERVED.search(line)) is not None:
            reserved = CPUSet() if m["reserved"] == "none" else _cpus(m["reserved"])
            break
    header_at = next((i for i, line in enumerate(lines) if line.startswith("NAMESPACE ")), None)
    if header_at is None:
        if any(line.strip() == "no containers" for line in lines):
            return Status([], reserved, text)
        raise StatusError(f"no container table in the output of status:\n{text}")
    header = lines[header_at]
    names = header.split()
    starts = [m.start() for m in re.finditer(r"\S+", header)]
    needed = {"NAMESPACE", "POD", "CONTAINER", "QOS", "KIND", "CPUS", "ID"}
    if not needed <= set(names):
        raise StatusError(f"status table lacks columns {sorted(needed - set(names))}:\n{header}")
    rows = []
    for line in lines[header_at + 1 :]:
        if not line.strip():
            break
        cells = {}
        for i, name in enumerate(names):
            end = starts[i + 1] if i + 1 < len(starts) else None
            cells[name] = line[starts[i] : end].strip()
        cpus_cell = cells["CPUS"]
        pending = _PENDING.match(cpus_cell)
        if pending is not None:
            applied, decided = _cpus(pending["applied"]), _cpus(pending["decided"])
        else:
            applied = decided = _cpus(cpus_cell)
        ident = cells["ID"]
        rows.append(
            StatusRow(
                namespace=cells["NAMESPACE"],
                pod=cells["POD"],
                container=cells["CONTAINER"],
                qos=cells["QOS"],
                kind=cells["KIND"],
                applied=applied,
                decided=decided,
                id_prefix="" if ident in ("pending", "-") else ident,
            )
        )
    return Status(rows, reserved, text)
