"""critest's pass sets, direct and through the relay, printed at the end of the run (also -q)."""

from __future__ import annotations

import pytest

from tests.critest.summary import RESULTS


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if not RESULTS:
        return
    terminalreporter.write_sep("=", "critest: specs passed directly and through the relay")
    for result in RESULTS:
        for line in result.lines():
            terminalreporter.write_line(line)
