"""The fault suite's budget, seed and bounds, read once from the environment:

- `FAULTS_SEED`: the seed of every random choice (printed in the summary; set it to replay a
  run); random by default.
- `FAULTS_SCALE`: multiplies every kind's fault count (a soak by hand: `FAULTS_SCALE=20`); 1.
- `FAULTS_COUNT_<KIND>`: one kind's count, e.g. `FAULTS_COUNT_KILL9=200`; wins over the scale.
- `FAULTS_SETTLE_SECONDS`: how long a re-pin or repair may take before a container counts as
  unrepaired; 20.
- `FAULTS_LEAK_SECONDS`: how long a new Guaranteed pod may be refused, with none running,
  before it is a leak; 15.
- `FAULTS_MAX_VIOLATIONS`: a kind stops injecting after this many violations (each costs a
  settle wait, and the verdict is known); 5.
- `FAULTS_REPORT`: also write the figures as a Markdown table to this file.
"""

from __future__ import annotations

import os
import secrets
from dataclasses import dataclass

# Faults per kind in one CI run of `make test`: at least 200 in all, the whole suite in well
# under five minutes on a 2-CPU machine. Kinds whose faults are cheap carry most of them.
DEFAULT_COUNTS: dict[str, int] = {
    "kill9": 10,
    "cancelled-create": 120,
    "start-repin-race": 30,
    "containerd-restart": 12,
    "state-write": 10,
    "corrupt-state": 9,  # one of each variant
    "changed-config": 8,
    "foreign-write": 21,
    "power-cut": 8,
}


def _env_float(name: str, default: float) -> float:
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    try:
        value = float(raw)
    except ValueError:
        raise ValueError(f"{name}={raw!r} is not a number") from None
    if value <= 0:
        raise ValueError(f"{name}={raw!r} must be positive")
    return value


def _env_seed() -> int:
    raw = os.environ.get("FAULTS_SEED", "").strip()
    if not raw:
        return secrets.randbelow(10**9)
    try:
        return int(raw)
    except ValueError:
        raise ValueError(f"FAULTS_SEED={raw!r} is not an integer") from None


@dataclass(frozen=True)
class Settings:
    seed: int
    scale: float
    settle_seconds: float
    leak_seconds: float
    max_violations: int
    report_path: str | None

    def count(self, kind: str) -> int:
        """How many faults of `kind` this run injects."""
        override = os.environ.get("FAULTS_COUNT_" + kind.upper().replace("-", "_"), "").strip()
        if override:
            return max(1, int(override))
        return max(1, round(DEFAULT_COUNTS[kind] * self.scale))


def load() -> Settings:
    return Settings(
        seed=_env_seed(),
        scale=_env_float("FAULTS_SCALE", 1.0),
        settle_seconds=_env_float("FAULTS_SETTLE_SECONDS", 20.0),
        leak_seconds=_env_float("FAULTS_LEAK_SECONDS", 15.0),
        max_violations=max(1, int(_env_float("FAULTS_MAX_VIOLATIONS", 5))),
        report_path=os.environ.get("FAULTS_REPORT") or None,
    )


# One seed for the whole run: the summary prints it, FAULTS_SEED=<it> replays the choices.
SETTINGS = load()


def fault_count(kind: str) -> int:
    return SETTINGS.count(kind)


def count_id(count: int) -> str:
    """The parameter id a fault test shows, e.g. `test_kill9_during_churn[10-faults]`."""
    return f"{count}-faults"
