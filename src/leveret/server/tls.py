"""TLS for the listeners: an ``ssl.SSLContext`` from RabbitMQ-style ``ssl_options``, and
who a client certificate says the peer is (for SASL EXTERNAL)."""

from __future__ import annotations

import ssl
from collections.abc import Iterable
from typing import Any

from cryptography import x509
from cryptography.x509.oid import NameOID

from leveret.broker.login import NO_CERTIFICATE
from leveret.server.config import TLS_VERSIONS, ConfigError, TlsConfig

# RabbitMQ's short names for the attribute types of a distinguished name (rabbit_cert_info).
_SHORT_NAMES = {
    NameOID.COMMON_NAME: "CN",
    NameOID.COUNTRY_NAME: "C",
    NameOID.LOCALITY_NAME: "L",
    NameOID.STATE_OR_PROVINCE_NAME: "ST",
    NameOID.ORGANIZATION_NAME: "O",
    NameOID.ORGANIZATIONAL_UNIT_NAME: "OU",
    NameOID.STREET_ADDRESS: "STREET",
    NameOID.DOMAIN_COMPONENT: "DC",
    NameOID.USER_ID: "UID",
    NameOID.SERIAL_NUMBER: "SERIALNUMBER",
    NameOID.TITLE: "T",
    NameOID.GIVEN_NAME: "GN",
    NameOID.SURNAME: "SN",
    NameOID.INITIALS: "I",
    NameOID.PSEUDONYM: "PSEUDONYM",
    NameOID.DN_QUALIFIER: "DNQ",
    NameOID.GENERATION_QUALIFIER: "GENERATION",
    NameOID.EMAIL_ADDRESS: "EMAILADDRESS",
}


def server_context(tls: TlsConfig, what: str = "tls") -> ssl.SSLContext:
    """The context of a TLS listener. A file that cannot be used is one ConfigError line."""
    if tls.certfile is None:
        raise ConfigError(f"[{what}] needs a certfile")
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    versions = sorted(getattr(ssl.TLSVersion, TLS_VERSIONS[v]) for v in tls.versions)
    context.minimum_version = versions[0]
    context.maximum_version = versions[-1]
    try:
        context.load_cert_chain(str(tls.certfile), str(tls.keyfile) if tls.keyfile else None)
    except FileNotFoundError as exc:
        raise ConfigError(f"[{what}] certificate or key not found: {exc.filename}") from exc
    except (ssl.SSLError, OSError) as exc:
        raise ConfigError(
            f"[{what}] cannot use certfile {tls.certfile} / keyfile {tls.keyfile}: {exc}"
        ) from exc
    if tls.cacertfile is not None:
        try:
            context.load_verify_locations(cafile=str(tls.cacertfile))
        except FileNotFoundError as exc:
            raise ConfigError(f"[{what}] cacertfile not found: {tls.cacertfile}") from exc
        except (ssl.SSLError, OSError) as exc:
            raise ConfigError(f"[{what}] cannot use cacertfile {tls.cacertfile}: {exc}") from exc
    if tls.verify == "verify_peer":
        if tls.cacertfile is None:
            raise ConfigError(f"[{what}] verify_peer needs a cacertfile to verify against")
        # fail_if_no_peer_cert: refuse a client with no certificate; without it, one that
        # sends none is let in (and EXTERNAL then has nobody to log in)
        context.verify_mode = ssl.CERT_REQUIRED if tls.fail_if_no_peer_cert else ssl.CERT_OPTIONAL
    else:
        context.verify_mode = ssl.CERT_NONE
    if tls.ciphers:
        try:
            context.set_ciphers(":".join(tls.ciphers))
        except ssl.SSLError as exc:
            raise ConfigError(f"[{what}] no usable cipher in {', '.join(tls.ciphers)}") from exc
    return context


def peer_certificate(transport: Any) -> x509.Certificate | None:
    """The client's certificate on a TLS transport (verified by the context), if any."""
    ssl_object = transport.get_extra_info("ssl_object")
    if ssl_object is None:
        return None
    der = ssl_object.getpeercert(binary_form=True)
    if not der:
        return None
    return x509.load_der_x509_certificate(der)


def connection_name(transport: Any) -> str:
    """RabbitMQ's name for a client connection, ``peer:port -> local:port`` (``?`` once
    its transport is gone)."""
    if transport is None:
        return "?"
    peer = transport.get_extra_info("peername")
    local = transport.get_extra_info("sockname")
    return f"{peer[0]}:{peer[1]} -> {local[0]}:{local[1]}" if peer and local else "?"


def certificate_login(transport: Any, login_from: str) -> tuple[str | None, str]:
    """Who the client's certificate on a TLS transport names, to log in as (EXTERNAL), and
    why no one when it names no one (rabbit_auth_mechanism_ssl's words)."""
    cert = peer_certificate(transport)
    if cert is None:
        return None, NO_CERTIFICATE
    return login_name(cert, login_from), "no name found"


def offered_mechanisms(enabled: Iterable[str], verify_peer: bool) -> tuple[str, ...]:
    """What a listener offers of the SASL mechanisms enabled, by name: EXTERNAL only where
    it verifies client certificates. (RabbitMQ lists them in its registry's order, which
    varies between starts.)"""
    return tuple(sorted(m for m in enabled if m != "EXTERNAL" or verify_peer))


def _cipher_parts(name: str, version: str) -> tuple[str, str, str] | None:
    """(key exchange, cipher, hash) of an OpenSSL cipher suite name, as Erlang's ssl
    names them (what RabbitMQ shows as ssl_key_exchange, ssl_cipher, ssl_hash); None for a
    suite it cannot name."""
    if version == "TLSv1.3":
        # TLS_AES_256_GCM_SHA384, TLS_CHACHA20_POLY1305_SHA256, ...
        body = name.removeprefix("TLS_").rsplit("_", 1)[0].lower()
        return "any", body, "aead"
    parts = name.split("-")
    kx_parts = []
    while parts and parts[0] in ("ECDHE", "DHE", "ECDSA", "RSA", "PSK"):
        kx_parts.append(parts.pop(0).lower())
    if not kx_parts or not parts:
        return None
    kx = "_".join(kx_parts)
    rest = "-".join(parts)
    aead = {"AES256-GCM-SHA384": "aes_256_gcm", "AES128-GCM-SHA256": "aes_128_gcm",
            "CHACHA20-POLY1305": "chacha20_poly1305"}  # fmt: skip
    if rest in aead:
        return kx, aead[rest], "aead"
    cbc = {"AES256-SHA384": ("aes_256_cbc", "sha384"), "AES128-SHA256": ("aes_128_cbc", "sha256"),
           "AES256-SHA": ("aes_256_cbc", "sha"), "AES128-SHA": ("aes_128_cbc", "sha")}  # fmt: skip
    if rest in cbc:
        return kx, *cbc[rest]
    return None


def _validity(cert: x509.Certificate) -> str:
    fmt = "%Y-%m-%dT%H:%M:%SZ"
    return f"{cert.not_valid_before_utc.strftime(fmt)} - {cert.not_valid_after_utc.strftime(fmt)}"


def connection_details(transport: Any) -> dict[str, Any]:
    """What RabbitMQ's management API shows of a connection's TLS, measured on the
    transport: protocol, suite, and the client certificate's subject, issuer, validity."""
    ssl_object = transport.get_extra_info("ssl_object")
    if ssl_object is None:
        return {}
    version = ssl_object.version() or ""
    out: dict[str, Any] = {"ssl": True, "ssl_protocol": version.lower()}
    cipher = ssl_object.cipher()
    parts = _cipher_parts(cipher[0], version) if cipher else None
    if parts is not None:
        out["ssl_key_exchange"], out["ssl_cipher"], out["ssl_hash"] = parts
    cert = peer_certificate(transport)
    if cert is not None:
        out["peer_cert_subject"] = distinguished_name(cert.subject)
        out["peer_cert_issuer"] = distinguished_name(cert.issuer)
        out["peer_cert_validity"] = _validity(cert)
    return out


def _escape(value: str) -> str:
    """RFC 4514 escaping of an attribute value, as RabbitMQ formats a DN."""
    out = []
    for i, ch in enumerate(value):
        if ch in ',+"\\<>;=' or (ch == "#" and i == 0) or (ch == " " and i in (0, len(value) - 1)):
            out.append("\\" + ch)
        else:
            out.append(ch)
    return "".join(out)


def distinguished_name(name: x509.Name) -> str:
    """A certificate's subject as RabbitMQ writes it: the RDNs last to first, joined by
    commas, short attribute names."""
    parts = []
    for rdn in reversed(name.rdns):
        parts.append(
            "+".join(
                f"{_SHORT_NAMES.get(a.oid, a.oid.dotted_string)}={_escape(str(a.value))}"
                for a in rdn
            )
        )
    return ",".join(parts)


def login_name(cert: x509.Certificate, login_from: str) -> str | None:
    """The user a certificate logs in as: its common name, or its whole subject."""
    if login_from == "distinguished_name":
        return distinguished_name(cert.subject)
    names = cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)
    if not names:
        return None
    value = names[0].value
    return value.decode() if isinstance(value, bytes) else str(value)
