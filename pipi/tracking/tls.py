"""A private certificate authority for the lab server's SeaweedFS (mutual TLS between its parts).

SeaweedFS's master, volume and filer ports (HTTP and gRPC) accept only clients that present a
certificate signed by this CA. The CA's key signs one node certificate (for 127.0.0.1), which
the SeaweedFS components present to each other, and is then dropped; the node's key is kept
owner-only in the server folder. Nobody else holds it, so another local OS user is refused at
the TLS handshake (``tlsv13 alert certificate required``).
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import os
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "RENEW_BEFORE",
    "VALID_FOR",
    "TlsFiles",
    "node_certificates",
]

#: A node certificate this close to its end is made again on the next start.
RENEW_BEFORE = dt.timedelta(days=30)
VALID_FOR = dt.timedelta(days=3650)


@dataclass(frozen=True)
class TlsFiles:
    """The PEM files of the lab's CA and of the one node certificate signed by it."""

    ca: Path
    cert: Path
    key: Path


def _write_private(path: Path, data: bytes) -> None:
    path.unlink(missing_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(data)


def _valid(files: TlsFiles) -> bool:
    from cryptography import x509

    if not all(p.exists() for p in (files.ca, files.cert, files.key)):
        return False
    cert = x509.load_pem_x509_certificate(files.cert.read_bytes())
    return cert.not_valid_after_utc - dt.datetime.now(dt.UTC) > RENEW_BEFORE


def node_certificates(folder: Path, *, ip: str = "127.0.0.1") -> TlsFiles:
    """The CA and node certificate kept in ``folder`` (mode 0700, files 0600), made when absent
    or near their end (then every part of the server gets the new ones at its next start)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    os.chmod(folder, 0o700)
    files = TlsFiles(folder / "ca.crt", folder / "node.crt", folder / "node.key")
    if _valid(files):
        return files
    now = dt.datetime.now(dt.UTC)
    ca_key, node_key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(
        ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "pipi lab server CA")])
    ca = (x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name)
          .public_key(ca_key.public_key()).serial_number(x509.random_serial_number())
          .not_valid_before(now - dt.timedelta(minutes=5)).not_valid_after(now + VALID_FOR)
          .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
          .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                       content_commitment=False, key_encipherment=False,
                                       data_encipherment=False, key_agreement=False,
                                       encipher_only=False, decipher_only=False), critical=True)
          .sign(ca_key, hashes.SHA256()))
    node = (x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "pipi-seaweedfs")]))
            .issuer_name(ca_name).public_key(node_key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(minutes=5)).not_valid_after(now + VALID_FOR)
            .add_extension(x509.SubjectAlternativeName([
                x509.IPAddress(ipaddress.ip_address(ip)), x509.DNSName("localhost")]),
                critical=False)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH,
                                                  ExtendedKeyUsageOID.CLIENT_AUTH]),
                           critical=False)
            .sign(ca_key, hashes.SHA256()))
    # the CA's key signs nothing after this: it is not kept, so no one can make another cert
    _write_private(files.key, node_key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption()))
    _write_private(files.cert, node.public_bytes(serialization.Encoding.PEM))
    _write_private(files.ca, ca.public_bytes(serialization.Encoding.PEM))
    return files
