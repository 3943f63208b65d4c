"""Prometheus histograms from the text format: one series' buckets, the difference of two
scrapes, and quantiles estimated as Prometheus' own `histogram_quantile` does (linear within
the bucket). Pure functions over text and plain data; used by `bench startup` to read the API
server's `apiserver_admission_webhook_admission_duration_seconds`."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

_LINE = re.compile(
    r"^(?P<name>[a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(?P<labels>[^}]*)\})?\s+(?P<value>\S+)"
)
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


@dataclass(frozen=True)
class Histogram:
    """Cumulative bucket counts by upper bound (the last is +Inf), with the sum and count."""

    buckets: tuple[tuple[float, float], ...]
    total: float
    count: float

    def minus(self, earlier: Histogram) -> Histogram:
        before = dict(earlier.buckets)
        return Histogram(
            tuple((le, n - before.get(le, 0.0)) for le, n in self.buckets),
            self.total - earlier.total,
            self.count - earlier.count,
        )

    def plus(self, other: Histogram) -> Histogram:
        """Both histograms' observations together (same buckets, as from one metric)."""
        if not self.buckets:
            return other
        theirs = dict(other.buckets)
        return Histogram(
            tuple((le, n + theirs.get(le, 0.0)) for le, n in self.buckets),
            self.total + other.total,
            self.count + other.count,
        )

    def quantile(self, q: float) -> float:
        """histogram_quantile(q): NaN without observations; the highest finite bound when the
        rank falls into the +Inf bucket."""
        if self.count <= 0 or not self.buckets:
            return math.nan
        rank = q * self.count
        lower_bound, lower_count = 0.0, 0.0
        for le, n in self.buckets:
            if n >= rank:
                if math.isinf(le):
                    return lower_bound
                if n == lower_count:
                    return le
                return lower_bound + (le - lower_bound) * (rank - lower_count) / (n - lower_count)
            lower_bound, lower_count = le, n
        return lower_bound

    @property
    def mean(self) -> float:
        return self.total / self.count if self.count > 0 else math.nan


EMPTY = Histogram((), 0.0, 0.0)


def parse_labels(text: str) -> dict[str, str]:
    return {k: v.replace('\\"', '"').replace("\\\\", "\\") for k, v in _LABEL.findall(text)}


def histogram(text: str, name: str, match: dict[str, str]) -> Histogram:
    """The series of histogram ``name`` whose labels include ``match``, summed over the labels
    not matched (for example every operation); EMPTY when there is none."""
    buckets: dict[float, float] = {}
    total = count = 0.0
    for line in text.splitlines():
        m = _LINE.match(line)
        if not m or not m["name"].startswith(name):
            continue
        labels = parse_labels(m["labels"] or "")
        if any(labels.get(k) != v for k, v in match.items()):
            continue
        value = float(m["value"])
        suffix = m["name"][len(name) :]
        if suffix == "_bucket":
            le = float(labels["le"])
            buckets[le] = buckets.get(le, 0.0) + value
        elif suffix == "_sum":
            total += value
        elif suffix == "_count":
            count += value
    if not buckets:
        return EMPTY
    return Histogram(tuple(sorted(buckets.items())), total, count)
