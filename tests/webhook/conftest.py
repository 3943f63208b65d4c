"""Fixtures of the webhook's tests: certificates made by the CLI, and real servers."""

from __future__ import annotations

import ssl
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

sys.path.insert(0, str(Path(__file__).parent))  # wh_support, whatever pytest's import mode

from wh_support import CONFIG_YAML, WebhookServer, make_certs


@pytest.fixture(scope="session")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A CA and serving certificate written by `resource-webhook certs`, as users make them."""
    return make_certs(tmp_path_factory.mktemp("certs"))


@pytest.fixture(scope="session")
def config_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("config") / "config.yaml"
    path.write_text(CONFIG_YAML)
    return path


@pytest.fixture(scope="session")
def tls_context(certs: Path) -> ssl.SSLContext:
    return ssl.create_default_context(cafile=str(certs / "ca.crt"))


@pytest.fixture(scope="session")
def server(
    certs: Path, config_file: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[WebhookServer]:
    """The webhook with --config (class names and classAccess checked), debug logs on."""
    srv = WebhookServer(
        tmp_path_factory.mktemp("server"),
        certs / "tls.crt",
        certs / "tls.key",
        "--config",
        str(config_file),
        "--log-level",
        "debug",
    )
    try:
        srv.wait_ready(certs / "ca.crt")
        yield srv
    finally:
        srv.stop()


@pytest.fixture(scope="session")
def plain_server(certs: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[WebhookServer]:
    """The webhook as deployed by default: no --config."""
    srv = WebhookServer(tmp_path_factory.mktemp("plain"), certs / "tls.crt", certs / "tls.key")
    try:
        srv.wait_ready(certs / "ca.crt")
        yield srv
    finally:
        srv.stop()


@pytest.fixture
def client(server: WebhookServer, tls_context: ssl.SSLContext) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=server.url, verify=tls_context, timeout=10) as c:
        yield c


@pytest.fixture
def plain_client(
    plain_server: WebhookServer, tls_context: ssl.SSLContext
) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=plain_server.url, verify=tls_context, timeout=10) as c:
        yield c
