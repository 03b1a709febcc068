"""A tiny certificate authority for local control planes, webhooks and the sandbox.

Why: the real kube-apiserver needs a serving certificate, a client CA and a service-account
key pair, and admission webhooks need TLS the API server trusts. Everything here is
short-lived, made on the fly and written only into throw-away directories.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import ipaddress
import pathlib
from collections.abc import Sequence

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

_VALIDITY = dt.timedelta(days=7)


def _pem_key(key: ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


@dataclasses.dataclass(frozen=True)
class KeyPair:
    """A PEM certificate and its PEM private key."""

    cert_pem: bytes
    key_pem: bytes

    def write(self, directory: pathlib.Path, stem: str) -> tuple[pathlib.Path, pathlib.Path]:
        """Write `<stem>.crt` and `<stem>.key` (key readable by the owner only)."""
        crt, key = directory / f"{stem}.crt", directory / f"{stem}.key"
        crt.write_bytes(self.cert_pem)
        key.touch(mode=0o600)
        key.write_bytes(self.key_pem)
        return crt, key


class TinyCA:
    """A self-signed CA that issues serving and client certificates."""

    def __init__(self, common_name: str) -> None:
        now = dt.datetime.now(dt.UTC)
        self._key = ec.generate_private_key(ec.SECP256R1())
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
        self._name = name
        self._cert = (
            x509.CertificateBuilder()
            .subject_name(name)
            .issuer_name(name)
            .public_key(self._key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(minutes=5))
            .not_valid_after(now + _VALIDITY)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True,
                    key_cert_sign=True,
                    crl_sign=True,
                    content_commitment=False,
                    key_encipherment=False,
                    data_encipherment=False,
                    key_agreement=False,
                    encipher_only=False,
                    decipher_only=False,
                ),
                critical=True,
            )
            .sign(self._key, hashes.SHA256())
        )

    @property
    def cert_pem(self) -> bytes:
        """The CA certificate, for trust bundles (kubeconfig, webhook caBundle)."""
        return self._cert.public_bytes(serialization.Encoding.PEM)

    @property
    def key_pem(self) -> bytes:
        """The CA's private key, for a signer that must issue certificates itself."""
        return _pem_key(self._key)

    def _issue(
        self,
        subject: x509.Name,
        usage: x509.ObjectIdentifier,
        hosts: Sequence[str] = (),
    ) -> KeyPair:
        now = dt.datetime.now(dt.UTC)
        key = ec.generate_private_key(ec.SECP256R1())
        builder = (
            x509.CertificateBuilder()
            .subject_name(subject)
            .issuer_name(self._name)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(minutes=5))
            .not_valid_after(now + _VALIDITY)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
        )
        if hosts:
            names: list[x509.GeneralName] = []
            for h in hosts:
                try:
                    names.append(x509.IPAddress(ipaddress.ip_address(h)))
                except ValueError:
                    names.append(x509.DNSName(h))
            builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
        cert = builder.sign(self._key, hashes.SHA256())
        return KeyPair(cert.public_bytes(serialization.Encoding.PEM), _pem_key(key))

    def serving(self, hosts: Sequence[str]) -> KeyPair:
        """A server certificate valid for the given DNS names and IP addresses."""
        subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, hosts[0])])
        return self._issue(subject, ExtendedKeyUsageOID.SERVER_AUTH, hosts)

    def client(self, user: str, groups: Sequence[str] = ()) -> KeyPair:
        """A client certificate: CN is the Kubernetes user name, O entries its groups."""
        attrs = [x509.NameAttribute(NameOID.COMMON_NAME, user)]
        attrs += [x509.NameAttribute(NameOID.ORGANIZATION_NAME, g) for g in groups]
        return self._issue(x509.Name(attrs), ExtendedKeyUsageOID.CLIENT_AUTH)


def rsa_key_pair() -> KeyPair:
    """An RSA key pair as (public key PEM, private key PEM) for service-account tokens."""
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    public = key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    return KeyPair(public, _pem_key(key))
