"""The webhook over TLS answers a deeply nested affinity annotation with a denial naming the
annotation (once a code-500 "internal error" with a traceback), and `serve --config` refuses a
configuration that is not UTF-8 or nests too deep in one line (once UnicodeDecodeError)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import httpx
from wh_support import body, container, pod, review

EXE = str(Path(sys.executable).parent / "resource-webhook")
KEY = "resource-enforcer.dev/affinity"


def test_nested_affinity_is_denied_naming_the_annotation(client: httpx.Client) -> None:
    for value in ("app: " + "[" * 3000 + "]" * 3000, "app:\n" + "- " * 3000 + "x"):
        p = pod([container("app")], annotations={KEY: value})
        answer = client.post("/mutate", content=body(review(p)))
        assert answer.status_code == 200
        response = answer.json()["response"]
        assert response["allowed"] is False
        status = response["status"]
        assert status["code"] == 400, status
        assert status["message"].startswith(f'annotation "{KEY}": app.0.0.0'), status
        assert "nested more than 16 levels deep" in status["message"]
        assert "Traceback" not in status["message"] and "internal" not in status["message"]


def _serve(certs: Path, config: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            EXE,
            "serve",
            "--tls-cert",
            str(certs / "tls.crt"),
            "--tls-key",
            str(certs / "tls.key"),
            "--port",
            "0",
            "--config",
            str(config),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_serve_refuses_a_configuration_that_is_not_utf8(certs: Path, tmp_path: Path) -> None:
    config = tmp_path / "latin1.yaml"
    config.write_bytes(b"policy:\n  name: static\n  reservedNamespaces: [caf\xe9]\n")
    out = _serve(certs, config)
    assert out.returncode == 1
    assert f"{config}: not UTF-8 text (byte 0xe9 at offset 49)" in out.stderr
    assert "Traceback" not in out.stderr and "UnicodeDecodeError" not in out.stderr


def test_serve_refuses_a_configuration_nested_too_deep(certs: Path, tmp_path: Path) -> None:
    config = tmp_path / "deep.yaml"
    config.write_text("classAccess:\n  rdt: " + "[" * 3000 + "]" * 3000 + "\n")
    out = _serve(certs, config)
    assert out.returncode == 1
    assert f"{config}: classAccess.rdt.0.0.0" in out.stderr
    assert "nested more than 32 levels deep" in out.stderr
    assert "Traceback" not in out.stderr and "RecursionError" not in out.stderr


def test_negative_requests_and_limits_are_denied(client: httpx.Client) -> None:
    """The API server refuses a negative request or limit; once the webhook annotated it."""
    for requests, limits, where, shown in (
        ({"cpu": "-1"}, None, "resources.requests.cpu", "-1"),
        ({"cpu": "100m"}, {"memory": "-1Gi"}, "resources.limits.memory", "-1Gi"),
        ({"cpu": "100m"}, {"cpu": -2}, "resources.limits.cpu", "-2"),
    ):
        for init in (False, True):
            c = container("app", requests=requests, limits=limits)
            p = pod([container("main")], init_containers=[c]) if init else pod([c])
            response = client.post("/mutate", content=body(review(p))).json()["response"]
            assert response["allowed"] is False
            status = response["status"]
            field = "initContainers" if init else "containers"
            assert status["code"] == 400
            assert status["message"] == (
                f'{field} "app": {where}: "{shown}" is negative (must be 0 or more)'
            ), status
