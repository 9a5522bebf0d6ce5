"""A tiny certificate authority for the test control plane.

Mirrors controller-runtime envtest's ``tinyca``: ECDSA P-256 keys, one CA for the
serving certificate, a separate CA for client certificates (common name = user,
organisation = groups), and a key pair the apiserver signs service-account tokens with.
Serving certificates may carry extra names and IPs (a node-facing apiserver needs the
``kubernetes`` Service's ClusterIP and ``kubernetes.default.svc``).
"""

from __future__ import annotations

import dataclasses
import datetime
import ipaddress
from collections.abc import Sequence

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

_VALIDITY = datetime.timedelta(days=7)


@dataclasses.dataclass(frozen=True)
class KeyPair:
    """A certificate and its private key, both PEM-encoded."""

    cert_pem: bytes
    key_pem: bytes


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


class TinyCA:
    """A self-signed CA that issues serving and client certificates."""

    def __init__(self, name: str) -> None:
        """Create a CA whose certificate is valid for a week."""
        self._key = ec.generate_private_key(ec.SECP256R1())
        subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
        now = datetime.datetime.now(datetime.UTC)
        self._cert = (
            x509.CertificateBuilder()
            .subject_name(subject)
            .issuer_name(subject)
            .public_key(self._key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + _VALIDITY)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
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
            .sign(self._key, hashes.SHA256())
        )

    @property
    def cert_pem(self) -> bytes:
        """The CA certificate, PEM-encoded."""
        return self._cert.public_bytes(serialization.Encoding.PEM)

    @property
    def key_pair(self) -> KeyPair:
        """The CA certificate with its key (used as the service-account signer)."""
        return KeyPair(self.cert_pem, _key_pem(self._key))

    def _issue(
        self,
        subject: x509.Name,
        usage: x509.ObjectIdentifier,
        sans: list[x509.GeneralName],
    ) -> KeyPair:
        key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.UTC)
        builder = (
            x509.CertificateBuilder()
            .subject_name(subject)
            .issuer_name(self._cert.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + _VALIDITY)
            .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
        )
        if sans:
            builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
        cert = builder.sign(self._key, hashes.SHA256())
        return KeyPair(cert.public_bytes(serialization.Encoding.PEM), _key_pem(key))

    def serving_cert(
        self, host: str, extra_ips: Sequence[str] = (), extra_names: Sequence[str] = ()
    ) -> KeyPair:
        """Issue a server certificate for ``localhost``, the IP ``host`` and any extra SANs."""
        subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")])
        sans: list[x509.GeneralName] = [x509.DNSName(name) for name in ("localhost", *extra_names)]
        sans += [
            x509.IPAddress(ipaddress.ip_address(ip)) for ip in dict.fromkeys((host, *extra_ips))
        ]
        return self._issue(subject, ExtendedKeyUsageOID.SERVER_AUTH, sans)

    def client_cert(self, user: str, groups: list[str]) -> KeyPair:
        """Issue a client certificate the apiserver maps to ``user`` in ``groups``."""
        attrs = [x509.NameAttribute(NameOID.COMMON_NAME, user)]
        attrs += [x509.NameAttribute(NameOID.ORGANIZATION_NAME, group) for group in groups]
        return self._issue(x509.Name(attrs), ExtendedKeyUsageOID.CLIENT_AUTH, [])
