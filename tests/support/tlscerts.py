"""A private CA and certificates for the TLS tests, made with cryptography: a CA, a
server certificate for localhost / 127.0.0.1, client certificates signed by the CA, and a
client certificate from another CA (which a verifying broker must refuse)."""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID


def _name(common_name: str, org: str = "Leveret tests") -> x509.Name:
    return x509.Name(
        [
            x509.NameAttribute(NameOID.COUNTRY_NAME, "GB"),
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, org),
            x509.NameAttribute(NameOID.COMMON_NAME, common_name),
        ]
    )


def _write(path: Path, key: ec.EllipticCurvePrivateKey, cert: x509.Certificate) -> None:
    path.with_suffix(".pem").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    path.with_suffix(".key").write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.TraditionalOpenSSL,
            serialization.NoEncryption(),
        )
    )
    path.with_suffix(".key").chmod(0o644)  # RabbitMQ's node runs as the rabbitmq user


@dataclass
class Pki:
    root: Path

    @property
    def ca(self) -> Path:
        return self.root / "ca.pem"

    @property
    def server_cert(self) -> Path:
        return self.root / "server.pem"

    @property
    def server_key(self) -> Path:
        return self.root / "server.key"

    def listener_flags(self, verify_peer: bool = False) -> list[str]:
        """``leveret server``'s flags for an amqps listener on a free port with the server's
        certificate; ``verify_peer``: clients present certificates signed by the CA."""
        flags = ["--amqps-port", "0", "--tls-cert", str(self.server_cert)]
        flags += ["--tls-key", str(self.server_key)]
        if verify_peer:
            flags += ["--tls-ca", str(self.ca), "--tls-verify-peer"]
        return flags

    def client(self, name: str) -> tuple[Path, Path]:
        """(certificate, key) of a client whose certificate's CN is ``name``."""
        return self.root / f"client-{name}.pem", self.root / f"client-{name}.key"

    @property
    def rogue(self) -> tuple[Path, Path]:
        """A client certificate signed by a CA the broker does not trust."""
        return self.root / "rogue.pem", self.root / "rogue.key"


def make_pki(
    root: Path, clients: tuple[str, ...] = ("leveret-tls-user",), server_days: int = 3650
) -> Pki:
    """The CA and certificates under ``root``; the server's certificate is valid for
    ``server_days`` from now (the others for ten years)."""
    root.mkdir(parents=True, exist_ok=True)
    now = datetime.datetime.now(datetime.UTC)

    def issue(
        subject: x509.Name,
        key: ec.EllipticCurvePrivateKey,
        issuer: x509.Name,
        issuer_key: ec.EllipticCurvePrivateKey,
        ca: bool = False,
        server: bool = False,
        days: int = 3650,
    ) -> x509.Certificate:
        builder = (
            x509.CertificateBuilder()
            .subject_name(subject)
            .issuer_name(issuer)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(days=1))
            .not_valid_after(now + datetime.timedelta(days=days))
            .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
        )
        if ca:
            builder = builder.add_extension(
                x509.KeyUsage(False, False, False, False, False, True, True, False, False),
                critical=True,
            )
        else:
            usage = ExtendedKeyUsageOID.SERVER_AUTH if server else ExtendedKeyUsageOID.CLIENT_AUTH
            builder = builder.add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
        if server:
            builder = builder.add_extension(
                x509.SubjectAlternativeName(
                    [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
                ),
                critical=False,
            )
        return builder.sign(issuer_key, hashes.SHA256())

    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = _name("Leveret test CA")
    ca_cert = issue(ca_name, ca_key, ca_name, ca_key, ca=True)
    _write(root / "ca", ca_key, ca_cert)
    server_key = ec.generate_private_key(ec.SECP256R1())
    _write(
        root / "server",
        server_key,
        issue(_name("localhost"), server_key, ca_name, ca_key, server=True, days=server_days),
    )
    for client in clients:
        key = ec.generate_private_key(ec.SECP256R1())
        _write(root / f"client-{client}", key, issue(_name(client), key, ca_name, ca_key))
    rogue_ca_key = ec.generate_private_key(ec.SECP256R1())
    rogue_ca = _name("Someone else's CA", "Elsewhere")
    rogue_key = ec.generate_private_key(ec.SECP256R1())
    _write(root / "rogue", rogue_key, issue(_name(clients[0]), rogue_key, rogue_ca, rogue_ca_key))
    return Pki(root)
