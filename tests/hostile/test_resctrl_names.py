"""Attack: an RDT class named after the kernel's own folders in resctrl (`info`, `mon_groups`,
`mon_data`), which would make the enforcer write a group's files over the kernel's. Refused by
the webhook at admission and by `check-config` (and the enforcer) in the configuration."""

from __future__ import annotations

import json
import ssl
import subprocess
from pathlib import Path

import httpx
import pytest

from tests.support.enforcer_process import console_script
from tests.webhook.wh_support import WebhookServer, body, container, pod, review

RESERVED = ["info", "mon_groups", "mon_data"]


def test_the_webhook_denies_the_kernels_resctrl_names(
    webhook: WebhookServer, certs: Path, measured
) -> None:
    ctx = ssl.create_default_context(cafile=str(certs / "ca.crt"))
    denied = 0
    with httpx.Client(base_url=webhook.url, verify=ctx, timeout=10) as client:
        for name in RESERVED:
            key = "rdtclass.resource-enforcer.dev/container.app"
            p = pod([container("app", {"cpu": "1"})], annotations={key: name})
            answer = client.post("/mutate", content=body(review(p))).json()["response"]
            assert answer["allowed"] is False
            assert answer["status"]["code"] == 400
            assert key in answer["status"]["message"] and "reserved" in answer["status"]["message"]
            denied += 1
    measured(
        "pods asking for RDT class info / mon_groups / mon_data",
        "denied at admission (400)",
        f"{denied} of {len(RESERVED)} denied",
    )


@pytest.mark.parametrize("name", RESERVED)
def test_check_config_refuses_the_kernels_resctrl_names(name: str, tmp_path: Path) -> None:
    config = tmp_path / "config.yaml"
    rdt = {"partitions": {"p": {"l3Allocation": "100%", "classes": {name: {}}}}}
    config.write_text(json.dumps({"rdt": rdt}))  # JSON is YAML
    out = subprocess.run(
        [console_script("resource-enforcer"), "check-config", str(config)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 1
    text = out.stdout + out.stderr
    assert "rdt.partitions.p.classes" in text and "reserved by the kernel in resctrl" in text
