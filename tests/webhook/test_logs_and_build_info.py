"""Both daemons, run as users run them: `--log-format json` gives lines with the same field
names in both programs, `--log-format text` plain lines in both, and each exports its build as
`<program>_build_info{version=...} 1`."""

from __future__ import annotations

import json
import re
import signal
import ssl
import subprocess
import time
import tomllib
from pathlib import Path
from typing import Any

import httpx
import pytest
from wh_support import BIN, WebhookServer

from tests.support.enforcer_process import free_port

ROOT = Path(__file__).resolve().parents[2]
VERSION = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
# The fields every JSON line starts with, in this order, in both programs.
BASE_FIELDS = ["time", "level", "logger", "msg"]
TIME = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}\+00:00$")
TEXT_LINE = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} (DEBUG|INFO|WARNING|ERROR) \S+: .")


class Enforcer:
    """`resource-enforcer run` with no runtime behind it (it serves and retries meanwhile)."""

    def __init__(self, work: Path, sysfs: Path, *args: str) -> None:
        self.port = free_port()
        self.log_path = work / "enforcer.log"
        cmd = [
            str(BIN / "resource-enforcer"),
            "run",
            f"--runtime-socket={work}/no-runtime.sock",
            f"--relay-socket={work}/relay/cri.sock",
            f"--state-dir={work}/state",
            f"--sysfs-root={sysfs}",
            f"--cgroupfs-root={work}/cgroup",
            f"--resctrl-root={work}/resctrl",
            f"--metrics-address=127.0.0.1:{self.port}",
            "--cluster-config=off",
            *args,
        ]
        with self.log_path.open("wb") as log:
            self.process = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)

    def log(self) -> str:
        return self.log_path.read_text()

    def wait_for(self, text: str, timeout: float = 30) -> None:
        deadline = time.monotonic() + timeout
        while text not in self.log():
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise AssertionError(f"no {text!r} in the enforcer's log:\n{self.log()}")
            time.sleep(0.05)

    def metrics(self) -> str:
        return httpx.get(f"http://127.0.0.1:{self.port}/metrics", timeout=5).text

    def stop(self) -> int:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        return self.process.returncode


@pytest.fixture
def sysfs(snapshot_roots: dict[str, Path]) -> Path:
    return snapshot_roots["sample1"]


def json_lines(text: str, program: str) -> list[dict[str, Any]]:
    records = []
    for line in text.splitlines():
        try:
            records.append(json.loads(line))
        except ValueError:
            raise AssertionError(f"{program} wrote a line that is not JSON: {line!r}") from None
    return records


def test_json_lines_have_the_same_fields_in_both_programs(
    certs: Path, sysfs: Path, tmp_path: Path
) -> None:
    enforcer = Enforcer(tmp_path, sysfs, "--log-format", "json")
    try:
        enforcer.wait_for("metrics on http://")
    finally:
        assert enforcer.stop() == 0
    webhook = WebhookServer(tmp_path, certs / "tls.crt", certs / "tls.key", "--log-format", "json")
    try:
        webhook.wait_ready(certs / "ca.crt")
    finally:
        assert webhook.stop() == 0
    shapes = {}
    for program, text in (
        ("resource-enforcer", enforcer.log()),
        ("resource-webhook", webhook.log()),
    ):
        records = json_lines(text, program)
        assert len(records) >= 2, text
        for record in records:
            assert list(record)[:4] == BASE_FIELDS, (program, record)
            assert TIME.match(record["time"]), record
            assert record["level"] in ("debug", "info", "warning", "error"), record
        shapes[program] = {k: type(v) for k, v in records[0].items() if k in BASE_FIELDS}
    assert shapes["resource-enforcer"] == shapes["resource-webhook"]


def test_text_lines_in_both_programs(certs: Path, sysfs: Path, tmp_path: Path) -> None:
    enforcer = Enforcer(tmp_path, sysfs)  # text is the enforcer's default
    try:
        enforcer.wait_for("metrics on http://")
    finally:
        assert enforcer.stop() == 0
    webhook = WebhookServer(tmp_path, certs / "tls.crt", certs / "tls.key", "--log-format", "text")
    try:
        webhook.wait_ready(certs / "ca.crt")
    finally:
        assert webhook.stop() == 0
    for text in (enforcer.log(), webhook.log()):
        lines = text.splitlines()
        assert lines and all(TEXT_LINE.match(line) for line in lines), text
    # The webhook's structured fields follow the message as key=value.
    assert re.search(r" INFO webhook.server: serving address=\S+ port=\d+$", webhook.log(), re.M)


def test_both_programs_export_their_build(certs: Path, sysfs: Path, tmp_path: Path) -> None:
    enforcer = Enforcer(tmp_path, sysfs)
    webhook = WebhookServer(tmp_path, certs / "tls.crt", certs / "tls.key")
    try:
        enforcer.wait_for("metrics on http://")
        webhook.wait_ready(certs / "ca.crt")
        ctx = ssl.create_default_context(cafile=str(certs / "ca.crt"))
        scraped = {
            "resource_enforcer": enforcer.metrics(),
            "resource_webhook": httpx.get(f"{webhook.url}/metrics", verify=ctx, timeout=5).text,
        }
    finally:
        enforcer.stop()
        webhook.stop()
    for prefix, text in scraped.items():
        assert f'{prefix}_build_info{{version="{VERSION}"}} 1.0' in text.splitlines()
