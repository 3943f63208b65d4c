"""The webhook's checks of scheduling- and memory-class annotations
(`schedulingclass.resource-enforcer.dev/container.C`, `.../pod`, the same with `memoryclass.`),
over real TLS with curl, against a server started with `--config`: a malformed or unknown class
is a 400 naming the key and the configured classes; a real-time class outside the namespaces
`classAccess.scheduling` lists, or a restricted memory class, a 403; allowed ones are admitted."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from tls_clients import curl_post
from wh_support import WebhookServer, container, pod, review

CONFIG = """\
policy: {name: static, reservedCPUs: "0"}
schedulingClasses:
  realtime: {policy: fifo, priority: 10}
  background: {policy: idle, nice: 10, ioClass: idle}
memoryClasses:
  protected: {min: "50%", high: "90%", swapMax: "0"}
classAccess:
  scheduling: {realtime: ["rt-*"]}
  memory: {protected: ["db-*"]}
"""
SCHED = "schedulingclass.resource-enforcer.dev"
MEM = "memoryclass.resource-enforcer.dev"


@pytest.fixture(scope="module")
def task_server(certs: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[WebhookServer]:
    folder = tmp_path_factory.mktemp("taskclass-webhook")
    (folder / "config.yaml").write_text(CONFIG)
    srv = WebhookServer(
        folder, certs / "tls.crt", certs / "tls.key", "--config", str(folder / "config.yaml")
    )
    try:
        srv.wait_ready(certs / "ca.crt")
        yield srv
    finally:
        srv.stop()


def ask(server: WebhookServer, certs: Path, annotations: dict[str, str], namespace: str) -> dict:
    p = pod(
        [container("app", {"cpu": "2"}, {"cpu": "2"})], annotations=annotations, namespace=namespace
    )
    status, out = curl_post(server, certs / "ca.crt", review(p, namespace=namespace))
    assert status == 200
    return out["response"]


def test_allowed_classes_are_admitted(task_server: WebhookServer, certs: Path) -> None:
    assert ask(task_server, certs, {f"{SCHED}/container.app": "realtime"}, "rt-audio")["allowed"]
    assert ask(task_server, certs, {f"{SCHED}/pod": "background"}, "web")["allowed"]
    assert ask(task_server, certs, {f"{MEM}/pod": "protected"}, "db-main")["allowed"]


@pytest.mark.parametrize(
    ("annotations", "code", "words"),
    [
        ({f"{SCHED}/pod": "realtme"}, 400, ['"realtme" is not configured', "background, realtime"]),
        ({f"{MEM}/container.app": "../../memory.max"}, 400, ["is malformed"]),
        ({f"{MEM}/container.other": "x" * 5000}, 400, ["is malformed"]),
        ({f"{SCHED}/container.app": "realtime"}, 403, ['namespace "web"', "rt-*", "background"]),
        ({f"{MEM}/pod": "protected"}, 403, ['namespace "web"', "db-*"]),
    ],
)
def test_bad_classes_are_denied_naming_the_key(
    task_server: WebhookServer, certs: Path, annotations: dict[str, str], code: int, words: list
) -> None:
    response = ask(task_server, certs, annotations, "web")
    assert response["allowed"] is False and response["status"]["code"] == code
    message = response["status"]["message"]
    (key,) = annotations
    assert f'"{key}"' in message and all(w in message for w in words), message
    assert len(message) < 400  # a hostile value is quoted only in part


def test_without_config_any_well_formed_class_goes(
    plain_server: WebhookServer, certs: Path
) -> None:
    assert ask(plain_server, certs, {f"{SCHED}/pod": "anything"}, "web")["allowed"]
    assert ask(plain_server, certs, {f"{MEM}/pod": "../x"}, "web")["status"]["code"] == 400
