"""Fixtures of the fault suite, and its figures printed at the end of the run.

`fault_env(kind, planned)` builds one fault kind's world (tests/faults/env.py) on the session's
private containerd and tears it down after the test. The figures of every kind that ran are
printed by `pytest_terminal_summary` (also with -q) and, with FAULTS_REPORT=FILE, written there
as a Markdown table.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Protocol

import pytest

from tests.faults.env import FaultEnv, make_env
from tests.faults.figures import RUN
from tests.faults.settings import SETTINGS
from tests.support.containerd import PrivateContainerd


class EnvFactory(Protocol):
    def __call__(
        self,
        kind: str,
        planned: int,
        *,
        prepare_state_dir: Callable[[Path], Callable[[], None]] | None = None,
    ) -> FaultEnv: ...


@pytest.fixture
def fault_env(containerd: PrivateContainerd, tmp_path: Path) -> Iterator[EnvFactory]:
    made: list[FaultEnv] = []

    def make(
        kind: str,
        planned: int,
        *,
        prepare_state_dir: Callable[[Path], Callable[[], None]] | None = None,
    ) -> FaultEnv:
        figures = RUN.kind(kind, planned)
        env = make_env(containerd, tmp_path, figures, prepare_state_dir=prepare_state_dir)
        made.append(env)
        if not env.start_enforcer("start"):
            pytest.fail(env.report("the enforcer did not start"), pytrace=False)
        env.relister.start()
        return env

    yield make
    for env in made:
        env.close()


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if not RUN.kinds:
        return
    terminalreporter.write_sep(
        "=", f"fault suite figures (seed {RUN.seed}: FAULTS_SEED={RUN.seed} replays the choices)"
    )
    for line in RUN.text_table():
        terminalreporter.write_line(line)
    if (stuck := RUN.stuck_tasks()) is not None:
        terminalreporter.write_line(stuck)
    if SETTINGS.report_path:
        Path(SETTINGS.report_path).write_text(RUN.markdown_table())
        terminalreporter.write_line(f"figures written to {SETTINGS.report_path}")
