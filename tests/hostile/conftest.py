"""The hostile-peer suite's fixtures, and its table of attack, bound and measured value.

Every test here attacks a real server process (the console scripts, over real TLS or real
sockets, on 127.0.0.1) and records what it measured with `measured(...)`; the table is printed
at the end of the run (docs/security.md keeps a copy).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.webhook.wh_support import WebhookServer, make_certs

Row = tuple[str, str, str]
_ROWS = pytest.StashKey[list[Row]]()


def pytest_configure(config: pytest.Config) -> None:
    config.stash[_ROWS] = []


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    rows = terminalreporter.config.stash.get(_ROWS, [])
    if not rows:
        return
    header: Row = ("attack", "bound", "measured")
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(3)]
    terminalreporter.section("hostile peers: attack, bound, measured")
    for row in [header, tuple("-" * w for w in widths), *rows]:
        line = " | ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True))
        terminalreporter.write_line(f"| {line} |")


Measured = Callable[[str, str, str], None]


@pytest.fixture
def measured(request: pytest.FixtureRequest) -> Measured:
    """Records one row of the table: the attack, the bound asserted, what was measured."""

    def record(attack: str, bound: str, value: str) -> None:
        request.config.stash[_ROWS].append((attack, bound, value))

    return record


@pytest.fixture(scope="session")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_certs(tmp_path_factory.mktemp("hostile-certs"))


@pytest.fixture
def webhook(certs: Path, tmp_path: Path) -> Iterator[WebhookServer]:
    """A fresh `resource-webhook serve` per test: each attack measures its own process."""
    server = WebhookServer(tmp_path, certs / "tls.crt", certs / "tls.key")
    try:
        server.wait_ready(certs / "ca.crt")
        yield server
    finally:
        server.stop()
