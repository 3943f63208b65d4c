"""The webhook's checks of CPU-class annotations (`cpuclass.resource-enforcer.dev/container.C`
and `.../pod`), over real TLS with curl, against a server started with `--config`: a malformed
or unknown class is a 400 naming the key and the configured classes, one `classAccess.cpu`
keeps from the namespace a 403; a configured class in an allowed namespace is admitted."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from tls_clients import curl_post
from wh_support import WebhookServer, container, pod, review

CONFIG = """\
policy: {name: topology-aware, reservedCPUs: "0"}
cpuClasses:
  turbo: {maxFreq: 3800000, disabledCstates: [C6]}
  eco: {maxFreq: 1200000}
classAccess:
  cpu: {turbo: ["ai-*"]}
"""
KEY = "cpuclass.resource-enforcer.dev"


@pytest.fixture(scope="module")
def cpu_server(certs: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[WebhookServer]:
    folder = tmp_path_factory.mktemp("cpuclass-webhook")
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


def test_a_configured_class_in_an_allowed_namespace_is_admitted(
    cpu_server: WebhookServer, certs: Path
) -> None:
    assert ask(cpu_server, certs, {f"{KEY}/container.app": "turbo"}, "ai-train")["allowed"]
    assert ask(cpu_server, certs, {f"{KEY}/pod": "eco"}, "web")["allowed"]  # eco: open to all


@pytest.mark.parametrize(
    ("annotations", "code", "words"),
    [
        ({f"{KEY}/pod": "turob"}, 400, ['"turob" is not configured', "eco, turbo"]),
        ({f"{KEY}/container.app": "../../cpu0"}, 400, ["is malformed"]),
        # A malformed name for a container the pod does not have is still refused.
        ({f"{KEY}/container.ap": "x" * 5000}, 400, ["is malformed"]),
        ({f"{KEY}/container.app": "turbo"}, 403, ['namespace "web"', "ai-*", "may use: eco"]),
    ],
)
def test_bad_classes_are_denied_naming_the_key(
    cpu_server: WebhookServer, certs: Path, annotations: dict[str, str], code: int, words: list
) -> None:
    response = ask(cpu_server, certs, annotations, "web")
    assert response["allowed"] is False and response["status"]["code"] == code
    message = response["status"]["message"]
    (key,) = annotations
    assert f'"{key}"' in message and all(w in message for w in words), message
    assert len(message) < 400  # a hostile value is quoted only in part


def test_without_config_any_well_formed_class_goes(
    plain_server: WebhookServer, certs: Path
) -> None:
    assert ask(plain_server, certs, {f"{KEY}/pod": "anything"}, "web")["allowed"]
    assert ask(plain_server, certs, {f"{KEY}/pod": "../x"}, "web")["status"]["code"] == 400
