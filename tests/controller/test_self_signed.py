"""The self-signed pair's program (``controller.self_signed``), run in this process."""

from __future__ import annotations

import datetime
import ipaddress
import socket
import stat
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.serialization import load_pem_private_key
from cryptography.x509.oid import NameOID

from controller.self_signed import main

NOW = datetime.datetime(2026, 1, 2, 3, 4, 5, tzinfo=datetime.UTC)


def test_the_pair_names_this_host_and_its_key_is_private(tmp_path: Path) -> None:
    """``tls.crt`` for the host, localhost and 127.0.0.1, signed by ``tls.key`` (0600)."""
    main([str(tmp_path), "--now", NOW.isoformat(), "--name", "metrics"])
    cert = x509.load_pem_x509_certificate((tmp_path / "tls.crt").read_bytes())
    key = load_pem_private_key((tmp_path / "tls.key").read_bytes(), password=None)
    assert isinstance(key, ec.EllipticCurvePrivateKey)
    assert cert.public_key() == key.public_key()
    assert stat.S_IMODE((tmp_path / "tls.key").stat().st_mode) == 0o600
    [name] = cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)
    assert name.value == "metrics"
    assert cert.issuer == cert.subject
    names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert names.get_values_for_type(x509.DNSName) == [socket.gethostname(), "localhost"]
    assert names.get_values_for_type(x509.IPAddress) == [ipaddress.ip_address("127.0.0.1")]
    assert cert.not_valid_before_utc == NOW - datetime.timedelta(minutes=5)
