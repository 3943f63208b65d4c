"""`resource-webhook certs`: a private CA and a serving certificate for the webhook's Service.

The API server only calls a webhook whose certificate is valid for `<service>.<namespace>.svc`
and signed by the CA in the MutatingWebhookConfiguration's `caBundle`; this writes both, plus a
ready-to-apply Secret. Keys are ECDSA P-256: small, and the fastest handshakes.
"""

from __future__ import annotations

import base64
import datetime as dt
import ipaddress
from dataclasses import dataclass
from pathlib import Path

import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from resource_files.safe_files import private_dir, read_file, write_file

DEFAULT_SECRET_NAME = "resource-webhook-tls"
CA_DAYS = 3650
SERVING_DAYS = 365
# Backdated so a node whose clock is slightly behind still accepts a fresh certificate.
_CLOCK_SKEW = dt.timedelta(minutes=5)


@dataclass(frozen=True)
class CertFiles:
    ca_crt: Path
    ca_key: Path
    tls_crt: Path
    tls_key: Path
    secret: Path
    ca_bundle: Path
    reused_ca: bool


def service_names(service: str, namespace: str) -> list[str]:
    """The DNS names a client inside or outside the cluster may use for the Service."""
    return [
        service,
        f"{service}.{namespace}",
        f"{service}.{namespace}.svc",
        f"{service}.{namespace}.svc.cluster.local",
        "localhost",
    ]


def _new_key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def make_ca(
    common_name: str, *, days: int = CA_DAYS
) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    key = _new_key()
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    now = dt.datetime.now(dt.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - _CLOCK_SKEW)
        .not_valid_after(now + dt.timedelta(days=days))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    return cert, key


def make_serving_cert(
    ca_cert: x509.Certificate,
    ca_key: ec.EllipticCurvePrivateKey,
    dns_names: list[str],
    ip_addresses: list[str],
    *,
    days: int = SERVING_DAYS,
) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    key = _new_key()
    now = dt.datetime.now(dt.UTC)
    sans: list[x509.GeneralName] = [x509.DNSName(n) for n in dns_names]
    sans += [x509.IPAddress(ipaddress.ip_address(a)) for a in ip_addresses]
    cert = (
        x509.CertificateBuilder()
        # Clients check the SANs; the CN is for people reading `openssl x509 -text`.
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, dns_names[2])]))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - _CLOCK_SKEW)
        .not_valid_after(min(now + dt.timedelta(days=days), ca_cert.not_valid_after_utc))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=False,
                crl_sign=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(x509.SubjectAlternativeName(sans), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()),
            critical=False,
        )
        .sign(ca_key, hashes.SHA256())
    )
    return cert, key


def _write(path: Path, data: bytes, mode: int) -> None:
    """Atomic replace, so a server watching the file never reads half of it: a temporary file
    made with O_CREAT|O_EXCL|O_NOFOLLOW and `mode` before any byte is written (a key is never
    readable by others, even briefly), renamed over `path`. A link planted at `path` is refused
    (UnsafePath), never written through."""
    write_file(path, data, mode=mode)


def secret_manifest(
    name: str, namespace: str, *, tls_crt: bytes, tls_key: bytes, ca_crt: bytes
) -> str:
    def b64(data: bytes) -> str:
        return base64.b64encode(data).decode()

    secret = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {"app.kubernetes.io/name": "resource-webhook"},
        },
        "type": "kubernetes.io/tls",
        "data": {"tls.crt": b64(tls_crt), "tls.key": b64(tls_key), "ca.crt": b64(ca_crt)},
    }
    return yaml.safe_dump(secret, sort_keys=False)


def _load_ca(crt: Path, key: Path) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    cert = x509.load_pem_x509_certificate(read_file(crt))
    private = serialization.load_pem_private_key(read_file(key), password=None)
    if not isinstance(private, ec.EllipticCurvePrivateKey):
        raise ValueError(f"{key}: not an ECDSA key")
    if private.public_key() != cert.public_key():
        raise ValueError(f"{key} does not belong to {crt}")
    return cert, private


def write_certs(
    service: str,
    namespace: str,
    out: str | Path,
    *,
    secret_name: str = DEFAULT_SECRET_NAME,
    days: int = SERVING_DAYS,
    new_ca: bool = False,
) -> CertFiles:
    """Writes ca.crt, ca.key, tls.crt, tls.key, webhook-secret.yaml and ca-bundle.b64 to `out`.

    An existing ca.crt/ca.key pair in `out` is reused unless `new_ca`: renewing the serving
    certificate then needs no new caBundle in the webhook configuration.
    """
    # Made 0700 when missing; an existing folder the user named keeps its mode (the keys in it
    # are 0600 all the same). A link at `out` itself is refused.
    out = private_dir(out, fix_mode=False)
    files = CertFiles(
        ca_crt=out / "ca.crt",
        ca_key=out / "ca.key",
        tls_crt=out / "tls.crt",
        tls_key=out / "tls.key",
        secret=out / "webhook-secret.yaml",
        ca_bundle=out / "ca-bundle.b64",
        reused_ca=False,
    )
    reuse = not new_ca and files.ca_crt.exists() and files.ca_key.exists()
    if reuse:
        ca_cert, ca_key = _load_ca(files.ca_crt, files.ca_key)
    else:
        ca_cert, ca_key = make_ca(f"{service}.{namespace} webhook CA")
    cert, key = make_serving_cert(
        ca_cert, ca_key, service_names(service, namespace), ["127.0.0.1"], days=days
    )
    ca_pem = ca_cert.public_bytes(serialization.Encoding.PEM)
    crt_pem = cert.public_bytes(serialization.Encoding.PEM)
    key_pem = _key_pem(key)
    if not reuse:
        _write(files.ca_key, _key_pem(ca_key), 0o600)
        _write(files.ca_crt, ca_pem, 0o644)
    # Key before certificate: a server that reloads between the two sees a mismatched pair,
    # refuses it and keeps serving with the old one until both are in place.
    _write(files.tls_key, key_pem, 0o600)
    _write(files.tls_crt, crt_pem, 0o644)
    _write(
        files.secret,
        secret_manifest(
            secret_name, namespace, tls_crt=crt_pem, tls_key=key_pem, ca_crt=ca_pem
        ).encode(),
        0o600,  # it holds the private key too
    )
    _write(files.ca_bundle, base64.b64encode(ca_pem) + b"\n", 0o644)
    return CertFiles(**{**files.__dict__, "reused_ca": reuse})
