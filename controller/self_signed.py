"""A self-signed serving certificate: the program a child process runs.

``python -m controller.self_signed DIR --now ISO --name CN`` writes ``DIR/tls.crt`` and
``DIR/tls.key`` (0600). The metrics server runs it as a child
(``controller.metrics_server.make_self_signed``) and never imports this module, so the
operator's own process never loads ``cryptography``: it is needed once, at start-up, and
would stay resident for the process's life (about 9 MiB of the operator's RSS).
"""

from __future__ import annotations

import argparse
import datetime
import ipaddress
import os
import socket
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID


def write_self_signed(directory: Path, common_name: str, now: datetime.datetime) -> None:
    """A new pair for this host as ``tls.crt`` and ``tls.key`` (0600), in this process.

    Valid from five minutes before ``now`` for a year, for this host's name, ``localhost``
    and ``127.0.0.1``.
    """
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    names: list[x509.GeneralName] = [
        x509.DNSName(socket.gethostname()),
        x509.DNSName("localhost"),
        x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
    ]
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=365))
        .add_extension(x509.SubjectAlternativeName(names), critical=False)
        .sign(key, hashes.SHA256())
    )
    (directory / "tls.crt").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    fd = os.open(directory / "tls.key", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as out:
        out.write(
            key.private_bytes(
                serialization.Encoding.PEM,
                serialization.PrivateFormat.PKCS8,
                serialization.NoEncryption(),
            )
        )


def main(argv: list[str] | None = None) -> None:
    """The child's entry point (see the module doc)."""
    parser = argparse.ArgumentParser(prog=f"python -m {__name__}")
    parser.add_argument("directory", type=Path)
    parser.add_argument("--now", type=datetime.datetime.fromisoformat, required=True)
    parser.add_argument("--name", required=True)
    args = parser.parse_args(argv)
    write_self_signed(args.directory, args.name, args.now)


if __name__ == "__main__":
    main()
