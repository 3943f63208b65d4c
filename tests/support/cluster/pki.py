"""The cluster's certificates, made with `cryptography`: one CA, the API server's and kubelet's
serving certificates, the client certificates of the admin, the controller manager, the
scheduler, kubelet and the API server (towards kubelet), and the service-account key pair.

ECDSA P-256 throughout, as `resource-webhook certs` makes the webhook's. Written once per cluster
folder; a second `make cluster-up` on the same folder reuses them.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

_DAYS = 30
_SKEW = dt.timedelta(minutes=5)


def _key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def _cert_pem(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


def _usage(*, ca: bool) -> x509.KeyUsage:
    return x509.KeyUsage(
        digital_signature=True,
        content_commitment=False,
        key_encipherment=False,
        data_encipherment=False,
        key_agreement=False,
        key_cert_sign=ca,
        crl_sign=ca,
        encipher_only=False,
        decipher_only=False,
    )


@dataclass(frozen=True)
class Pair:
    """A certificate and its key, as files."""

    crt: Path
    key: Path


class ClusterPKI:
    """Every certificate of one cluster, under ``folder`` (made 0700)."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.ca = Pair(folder / "ca.crt", folder / "ca.key")
        self.sa_key = folder / "sa.key"
        self.sa_pub = folder / "sa.pub"

    def pair(self, name: str) -> Pair:
        return Pair(self.folder / f"{name}.crt", self.folder / f"{name}.key")

    def ensure(
        self,
        node: str,
        node_ip: str,
        service_ip: str,
        *,
        clients: dict[str, tuple[str, str]],
        extra_ips: tuple[str, ...] = (),
    ) -> None:
        """Make what is missing. ``clients``: file name -> (common name, organization);
        ``extra_ips``: more addresses of the API server (a VM's gateway to the host)."""
        self.folder.mkdir(parents=True, exist_ok=True, mode=0o700)
        if not (self.ca.crt.exists() and self.ca.key.exists()):
            self._write_ca()
        ca_cert = x509.load_pem_x509_certificate(self.ca.crt.read_bytes())
        ca_key = serialization.load_pem_private_key(self.ca.key.read_bytes(), password=None)
        assert isinstance(ca_key, ec.EllipticCurvePrivateKey)
        servers = {
            "apiserver": (
                "kube-apiserver",
                [
                    "kubernetes",
                    "kubernetes.default",
                    "kubernetes.default.svc",
                    "kubernetes.default.svc.cluster.local",
                    "localhost",
                    node,
                ],
                ["127.0.0.1", node_ip, service_ip, *extra_ips],
            ),
            "kubelet": (node, [node, "localhost"], ["127.0.0.1", node_ip]),
        }
        for name, (cn, dns, ips) in servers.items():
            if not self.pair(name).crt.exists():
                self._issue(ca_cert, ca_key, name, cn, None, server=(dns, ips))
        for name, (cn, org) in clients.items():
            if not self.pair(name).crt.exists():
                self._issue(ca_cert, ca_key, name, cn, org, server=None)
        if not self.sa_key.exists():
            key = _key()
            self.sa_key.write_bytes(_key_pem(key))
            self.sa_key.chmod(0o600)
            self.sa_pub.write_bytes(
                key.public_key().public_bytes(
                    serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
                )
            )

    def _write_ca(self) -> None:
        key = _key()
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "kre-cluster-ca")])
        now = dt.datetime.now(dt.UTC)
        cert = (
            x509.CertificateBuilder()
            .subject_name(name)
            .issuer_name(name)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - _SKEW)
            .not_valid_after(now + dt.timedelta(days=_DAYS))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(_usage(ca=True), critical=True)
            .add_extension(
                x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False
            )
            .sign(key, hashes.SHA256())
        )
        self.ca.key.write_bytes(_key_pem(key))
        self.ca.key.chmod(0o600)
        self.ca.crt.write_bytes(_cert_pem(cert))

    def _issue(
        self,
        ca_cert: x509.Certificate,
        ca_key: ec.EllipticCurvePrivateKey,
        name: str,
        common_name: str,
        organization: str | None,
        *,
        server: tuple[list[str], list[str]] | None,
    ) -> None:
        key = _key()
        attrs = [x509.NameAttribute(NameOID.COMMON_NAME, common_name)]
        if organization:
            attrs.insert(0, x509.NameAttribute(NameOID.ORGANIZATION_NAME, organization))
        now = dt.datetime.now(dt.UTC)
        builder = (
            x509.CertificateBuilder()
            .subject_name(x509.Name(attrs))
            .issuer_name(ca_cert.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - _SKEW)
            .not_valid_after(now + dt.timedelta(days=_DAYS))
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(_usage(ca=False), critical=True)
            .add_extension(
                x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()),
                critical=False,
            )
        )
        if server is not None:
            dns, ips = server
            sans: list[x509.GeneralName] = [x509.DNSName(n) for n in dns]
            sans += [x509.IPAddress(ipaddress.ip_address(a)) for a in ips]
            builder = builder.add_extension(
                x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False
            ).add_extension(x509.SubjectAlternativeName(sans), critical=False)
        else:
            builder = builder.add_extension(
                x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False
            )
        cert = builder.sign(ca_key, hashes.SHA256())
        pair = self.pair(name)
        pair.key.write_bytes(_key_pem(key))
        pair.key.chmod(0o600)
        pair.crt.write_bytes(_cert_pem(cert))
