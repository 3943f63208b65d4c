"""The critest pass sets of a run, printed at its end (tests/critest/conftest.py)."""

from __future__ import annotations

from dataclasses import dataclass

from tests.support.critest import CritestResult


@dataclass
class RuntimeResult:
    runtime: str
    direct: CritestResult
    relay: CritestResult

    def lines(self) -> list[str]:
        d, r = self.direct, self.relay
        out = [
            f"{self.runtime}: direct {len(d.passed)} passed, {len(d.failed)} failed, "
            f"{len(d.named('skipped'))} skipped; relay {len(r.passed)} passed, "
            f"{len(r.failed)} failed, {len(r.named('skipped'))} skipped"
        ]
        out += [
            f"  only directly: {n}\n      relay: {r.messages.get(n, r.states.get(n, '?'))}"
            for n in sorted(d.passed & r.failed)
        ]
        out += [f"  only through the relay: {n}" for n in sorted(r.passed & d.failed)]
        out += [
            f"  passed one way, skipped itself the other: {n}"
            for n in sorted((d.passed ^ r.passed) - d.failed - r.failed)
        ]
        out += [f"  fails directly: {n}\n      {d.messages.get(n, '')}" for n in sorted(d.failed)]
        out += [f"  passed at a second attempt directly: {n}" for n in sorted(d.retried)]
        out += [f"  passed at a second attempt through the relay: {n}" for n in sorted(r.retried)]
        out += [f"  failed beside others, passed alone, directly: {n}" for n in sorted(d.rechecked)]
        out += [
            f"  failed beside others, passed alone, through the relay: {n}"
            for n in sorted(r.rechecked)
        ]
        return out


RESULTS: list[RuntimeResult] = []
