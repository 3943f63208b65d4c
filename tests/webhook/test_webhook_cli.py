"""`resource-webhook certs` and `resource-webhook serve` as commands: files, exits, signals."""

from __future__ import annotations

import base64
import ipaddress
import signal
import stat
import subprocess
import time
from pathlib import Path

import httpx
import pytest
import yaml
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.x509.oid import ExtendedKeyUsageOID
from wh_support import BIN, WebhookServer, body, deployment_pod, review

from webhook.cli import main
from webhook.tls import ReloadingTLS

EXE = str(BIN / "resource-webhook")


def run(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run([EXE, *args], capture_output=True, text=True, timeout=timeout)


def test_certs_writes_the_contract_files(certs: Path) -> None:
    names = {p.name for p in certs.iterdir()}
    assert {
        "ca.crt",
        "ca.key",
        "tls.crt",
        "tls.key",
        "webhook-secret.yaml",
        "ca-bundle.b64",
    } <= names
    for key in ("ca.key", "tls.key", "webhook-secret.yaml"):
        assert stat.S_IMODE((certs / key).stat().st_mode) == 0o600, key


def test_serving_certificate_names_and_chain(certs: Path) -> None:
    ca = x509.load_pem_x509_certificate((certs / "ca.crt").read_bytes())
    cert = x509.load_pem_x509_certificate((certs / "tls.crt").read_bytes())
    sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert sans.get_values_for_type(x509.DNSName) == [
        "resource-webhook",
        "resource-webhook.resource-enforcer",
        "resource-webhook.resource-enforcer.svc",
        "resource-webhook.resource-enforcer.svc.cluster.local",
        "localhost",
    ]
    assert sans.get_values_for_type(x509.IPAddress) == [ipaddress.ip_address("127.0.0.1")]
    assert cert.issuer == ca.subject
    cert.verify_directly_issued_by(ca)
    assert ca.extensions.get_extension_for_class(x509.BasicConstraints).value.ca is True
    assert cert.extensions.get_extension_for_class(x509.BasicConstraints).value.ca is False
    usage = cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert ExtendedKeyUsageOID.SERVER_AUTH in usage
    key = serialization.load_pem_private_key((certs / "tls.key").read_bytes(), password=None)
    assert key.public_key() == cert.public_key()


def test_secret_and_ca_bundle(certs: Path) -> None:
    secret = yaml.safe_load((certs / "webhook-secret.yaml").read_text())
    assert secret["apiVersion"] == "v1" and secret["kind"] == "Secret"
    assert secret["type"] == "kubernetes.io/tls"
    assert secret["metadata"] == {
        "name": "resource-webhook-tls",
        "namespace": "resource-enforcer",
        "labels": {"app.kubernetes.io/name": "resource-webhook"},
    }
    for name in ("tls.crt", "tls.key", "ca.crt"):
        assert base64.b64decode(secret["data"][name]) == (certs / name).read_bytes()
    bundle = (certs / "ca-bundle.b64").read_text()
    assert bundle.endswith("\n") and "\n" not in bundle.strip()
    assert base64.b64decode(bundle) == (certs / "ca.crt").read_bytes()


def test_certs_again_keeps_the_ca_unless_asked(tmp_path: Path) -> None:
    assert main(["certs", "--service", "s", "--namespace", "n", "--out", str(tmp_path)]) == 0
    ca, crt = (tmp_path / "ca.crt").read_bytes(), (tmp_path / "tls.crt").read_bytes()
    assert main(["certs", "--service", "s", "--namespace", "n", "--out", str(tmp_path)]) == 0
    assert (tmp_path / "ca.crt").read_bytes() == ca and (tmp_path / "tls.crt").read_bytes() != crt
    assert (
        main(["certs", "--service", "s", "--namespace", "n", "--out", str(tmp_path), "--new-ca"])
        == 0
    )
    assert (tmp_path / "ca.crt").read_bytes() != ca


def test_certs_needs_its_flags() -> None:
    out = run("certs", "--service", "x")
    assert out.returncode == 2 and "--namespace" in out.stderr


def test_help_lists_both_commands() -> None:
    out = run("--help")
    assert out.returncode == 0 and "serve" in out.stdout and "certs" in out.stdout


def test_bad_config_exits_1_naming_the_problems(certs: Path, tmp_path: Path) -> None:
    config = tmp_path / "bad.yaml"
    config.write_text("policy:\n  name: fastest\nclassAccess:\n  rdt: {gold: 3}\nbogus: 1\n")
    out = run("serve", "--tls-cert", str(certs / "tls.crt"), "--tls-key", str(certs / "tls.key"),
              "--config", str(config))  # fmt: skip
    assert out.returncode == 1
    assert (
        "policy.name" in out.stderr
        and "classAccess.rdt.gold" in out.stderr
        and "bogus" in out.stderr
    )


def test_missing_config_exits_1(certs: Path, tmp_path: Path) -> None:
    out = run("serve", "--tls-cert", str(certs / "tls.crt"), "--tls-key", str(certs / "tls.key"),
              "--config", str(tmp_path / "nope.yaml"))  # fmt: skip
    assert out.returncode == 1 and "cannot read" in out.stderr


def test_missing_or_mismatched_certificate_exits_1(certs: Path, tmp_path: Path) -> None:
    out = run(
        "serve", "--tls-cert", str(tmp_path / "none.crt"), "--tls-key", str(certs / "tls.key")
    )
    assert out.returncode == 1 and "cannot load" in out.stderr
    out = run("serve", "--tls-cert", str(certs / "ca.crt"), "--tls-key", str(certs / "tls.key"))
    assert out.returncode == 1 and "cannot load" in out.stderr


@pytest.mark.tls
def test_port_in_use_exits_1(certs: Path, plain_server: WebhookServer) -> None:
    out = run("serve", "--tls-cert", str(certs / "tls.crt"), "--tls-key", str(certs / "tls.key"),
              "--host", "127.0.0.1", "--port", str(plain_server.port))  # fmt: skip
    assert out.returncode == 1 and "cannot listen" in out.stderr


@pytest.mark.tls
def test_sigterm_finishes_and_exits_0(certs: Path, tmp_path: Path) -> None:
    server = WebhookServer(tmp_path, certs / "tls.crt", certs / "tls.key")
    server.wait_ready(certs / "ca.crt")
    ctx = __import__("ssl").create_default_context(cafile=str(certs / "ca.crt"))
    with httpx.Client(base_url=server.url, verify=ctx) as c:
        assert c.post("/mutate", content=body(review(deployment_pod()))).status_code == 200
        start = time.monotonic()
        server.process.send_signal(signal.SIGTERM)
        assert server.process.wait(15) == 0
    # An idle keep-alive connection does not hold the shutdown up.
    assert time.monotonic() - start < 8  # not the 10 s graceful timeout
    messages = [r["msg"] for r in server.log_records()]
    assert "Application shutdown complete." in messages and messages[-1] == "stopped"
    server.stop()


# --- the reloading TLS context, in-process -----------------------------------------------------


def test_reloading_context_follows_the_files(tmp_path: Path) -> None:
    from webhook.certs import write_certs

    write_certs("s", "n", tmp_path)
    events = []
    tls = ReloadingTLS(tmp_path / "tls.crt", tmp_path / "tls.key", on_reload=events.append)
    assert tls.current() is tls.context and tls.context.minimum_version.name == "TLSv1_2"
    key = (tmp_path / "tls.key").read_bytes()

    # A certificate whose key has not arrived yet: refused, the old pair keeps serving.
    write_certs("s", "n", tmp_path / "other", new_ca=True)
    (tmp_path / "tls.crt").write_bytes((tmp_path / "other" / "tls.crt").read_bytes())
    assert tls.current() is tls.context
    assert [e.ok for e in events] == [False]
    assert tls.current() is tls.context and len(events) == 1  # not retried until files change

    (tmp_path / "tls.key").write_bytes((tmp_path / "other" / "tls.key").read_bytes())
    fresh = tls.current()
    assert fresh is not tls.context and [e.ok for e in events] == [False, True]
    assert tls.current() is fresh

    # Files briefly missing mid-swap: keep what we have.
    (tmp_path / "tls.key").unlink()
    assert tls.current() is fresh
    (tmp_path / "tls.key").write_bytes(key)
