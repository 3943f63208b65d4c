"""The webhook's TLS itself, over a served webhook: the versions served and refused, the
certificate's names, and certificate rotation while serving (kubelet's volume, overwritten
files)."""

from __future__ import annotations

import os
import shutil
import socket
import ssl
import subprocess
from pathlib import Path

import httpx
import pytest
from tls_clients import CURL, curl_post, metric_value
from wh_support import (
    WebhookServer,
    body,
    deployment_pod,
    review,
)

from webhook.certs import write_certs

pytestmark = pytest.mark.tls


# --- TLS itself --------------------------------------------------------------------------------


def _handshake(server: WebhookServer, ca: Path, **versions: ssl.TLSVersion) -> str | None:
    ctx = ssl.create_default_context(cafile=str(ca))
    for attr, value in versions.items():
        setattr(ctx, attr, value)
    with (
        socket.create_connection(("127.0.0.1", server.port), timeout=10) as raw,
        ctx.wrap_socket(raw, server_hostname="localhost") as tls,
    ):
        return tls.version()


def test_tls_1_3_and_1_2_are_served(server: WebhookServer, certs: Path) -> None:
    assert _handshake(server, certs / "ca.crt") == "TLSv1.3"
    assert _handshake(server, certs / "ca.crt", maximum_version=ssl.TLSVersion.TLSv1_2) == "TLSv1.2"


@pytest.mark.filterwarnings("ignore:ssl.TLSVersion:DeprecationWarning")
def test_tls_below_1_2_is_refused(server: WebhookServer, certs: Path) -> None:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.load_verify_locations(str(certs / "ca.crt"))
    # The client is allowed down to TLS 1.0 (at OpenSSL's lowest security level) and offers
    # no more than 1.1: only the server's minimum can make this fail.
    ctx.set_ciphers("DEFAULT:@SECLEVEL=0")
    ctx.minimum_version = ssl.TLSVersion.TLSv1
    ctx.maximum_version = ssl.TLSVersion.TLSv1_1
    with (
        socket.create_connection(("127.0.0.1", server.port), timeout=10) as raw,
        pytest.raises(ssl.SSLError),
    ):
        ctx.wrap_socket(raw, server_hostname="localhost")
    out = subprocess.run(
        [str(CURL), "-sS", "--cacert", str(certs / "ca.crt"), "--tlsv1.0", "--tls-max", "1.1",
         f"{server.url}/healthz"],
        capture_output=True, text=True, timeout=30,
    )  # fmt: skip
    assert out.returncode != 0


def test_certificate_is_valid_for_the_ip_and_the_names(server: WebhookServer, certs: Path) -> None:
    ctx = ssl.create_default_context(cafile=str(certs / "ca.crt"))
    assert httpx.get(f"https://127.0.0.1:{server.port}/healthz", verify=ctx).status_code == 200


# --- rotation ----------------------------------------------------------------------------------


def _kubelet_volume(root: Path, source: Path, generation: int) -> None:
    """Files laid out the way the kubelet projects a Secret, updated the way it updates them:
    a new timestamped folder, then one atomic swap of the `..data` symlink."""
    folder = root / f"..2026_11_22_{generation:02d}"
    folder.mkdir()
    for name in ("tls.crt", "tls.key", "ca.crt"):
        shutil.copy(source / name, folder / name)
    tmp = root / "..data_tmp"
    tmp.symlink_to(folder.name)
    os.replace(tmp, root / "..data")
    for name in ("tls.crt", "tls.key", "ca.crt"):
        link = root / name
        if not link.is_symlink():
            link.symlink_to(f"..data/{name}")


def _verified(url: str, ca: Path) -> bool:
    ctx = ssl.create_default_context(cafile=str(ca))
    try:
        return httpx.get(f"{url}/healthz", verify=ctx, timeout=5).status_code == 200
    except httpx.ConnectError as exc:
        assert "CERTIFICATE_VERIFY_FAILED" in str(exc), exc
        return False


def test_certificate_rotation_while_serving(tmp_path: Path) -> None:
    old = write_certs("resource-webhook", "resource-enforcer", tmp_path / "old")
    new = write_certs("resource-webhook", "resource-enforcer", tmp_path / "new")
    volume = tmp_path / "volume"
    volume.mkdir()
    _kubelet_volume(volume, tmp_path / "old", 1)
    server = WebhookServer(tmp_path, volume / "tls.crt", volume / "tls.key")
    try:
        server.wait_ready(old.ca_crt)
        keep_alive = httpx.Client(
            base_url=server.url, verify=ssl.create_default_context(cafile=str(old.ca_crt))
        )
        assert keep_alive.post("/mutate", content=body(review(deployment_pod()))).status_code == 200

        _kubelet_volume(volume, tmp_path / "new", 2)

        # New connections get the new certificate at once, by name and by IP (no SNI).
        assert _verified(server.url, new.ca_crt)
        assert _verified(f"https://127.0.0.1:{server.port}", new.ca_crt)
        assert not _verified(server.url, old.ca_crt)
        status, _ = curl_post(server, new.ca_crt, review(deployment_pod()))
        assert status == 200
        # The connection opened before the rotation carries on.
        assert keep_alive.post("/mutate", content=body(review(deployment_pod()))).status_code == 200
        keep_alive.close()

        metrics = httpx.get(
            f"{server.url}/metrics", verify=ssl.create_default_context(cafile=str(new.ca_crt))
        ).text
        assert (
            metric_value(metrics, 'resource_webhook_certificate_reloads_total{result="success"}')
            == 1
        )
        assert any(r["msg"] == "certificate reloaded" for r in server.log_records())
    finally:
        assert server.stop() == 0


def test_rotation_by_overwriting_the_files(tmp_path: Path) -> None:
    """`resource-webhook certs` run again into the folder the server reads (atomic renames)."""
    served = tmp_path / "served"
    first = write_certs("resource-webhook", "resource-enforcer", served)
    server = WebhookServer(tmp_path, served / "tls.crt", served / "tls.key")
    try:
        server.wait_ready(first.ca_crt)
        old_ca = tmp_path / "old-ca.crt"
        shutil.copy(first.ca_crt, old_ca)
        second = write_certs("resource-webhook", "resource-enforcer", served, new_ca=True)
        assert _verified(server.url, second.ca_crt)
        assert not _verified(server.url, old_ca)
    finally:
        assert server.stop() == 0
