"""A TLS front for the test dockerd: certificates made with `cryptography` and a small proxy
that terminates TLS (requiring a client certificate, as `dockerd --tlsverify` does) and passes
the bytes to the real engine's unix socket. The docker SDK on the other side is the real one."""

from __future__ import annotations

import datetime
import ipaddress
import select
import socket
import ssl
import threading
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID


def _name(common: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common)])


def _write(
    folder: Path, cert_file: str, key_file: str, cert: x509.Certificate,
    key: ec.EllipticCurvePrivateKey,
) -> None:
    (folder / cert_file).write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    (folder / key_file).write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )


def _cert(
    subject: str, key: ec.EllipticCurvePrivateKey, issuer: x509.Name,
    signer: ec.EllipticCurvePrivateKey, usage: x509.ObjectIdentifier | None, ca: bool = False,
) -> x509.Certificate:
    now = datetime.datetime.now(datetime.timezone.utc)
    builder = (
        x509.CertificateBuilder()
        .subject_name(_name(subject))
        .issuer_name(issuer)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(hours=1))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
    )
    if ca:
        builder = builder.add_extension(
            x509.KeyUsage(False, False, False, False, False, True, True, False, False), True
        )
    if usage is not None:
        builder = builder.add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
    if usage == ExtendedKeyUsageOID.SERVER_AUTH:
        builder = builder.add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False,
        )
    return builder.sign(signer, hashes.SHA256())


def make_certs(folder: Path, ca_name: str = "pdctl test CA") -> Path:
    """A CA, a server certificate for 127.0.0.1 (server.pem/server-key.pem) and a client
    certificate, laid out as docker expects: ca.pem, cert.pem, key.pem. Returns `folder`."""
    folder.mkdir(parents=True, exist_ok=True)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca = _cert(ca_name, ca_key, _name(ca_name), ca_key, None, ca=True)
    (folder / "ca.pem").write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    server_key = ec.generate_private_key(ec.SECP256R1())
    _write(
        folder, "server.pem", "server-key.pem",
        _cert("127.0.0.1", server_key, ca.subject, ca_key, ExtendedKeyUsageOID.SERVER_AUTH),
        server_key,
    )
    client_key = ec.generate_private_key(ec.SECP256R1())
    _write(
        folder, "cert.pem", "key.pem",
        _cert("pdctl", client_key, ca.subject, ca_key, ExtendedKeyUsageOID.CLIENT_AUTH), client_key,
    )
    return folder


class TlsEngine:
    """tcp://127.0.0.1:PORT with TLS in front of the engine at `socket_path`."""

    def __init__(self, certs: Path, socket_path: str) -> None:
        self.context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.context.load_cert_chain(certs / "server.pem", certs / "server-key.pem")
        self.context.verify_mode = ssl.CERT_REQUIRED
        self.context.load_verify_locations(certs / "ca.pem")
        self.socket_path = socket_path
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.served = 0  # connections that completed the TLS handshake
        self.refused = 0  # connections whose handshake failed
        self._changed = threading.Condition()
        threading.Thread(target=self._accept, daemon=True).start()

    def url(self) -> str:
        return f"tcp://127.0.0.1:{self.port}"

    def close(self) -> None:
        self.listener.close()

    def wait_refused(self, more_than: int, timeout: float = 30.0) -> int:
        """The refusal count once it passes `more_than` (or when `timeout` runs out). The
        server sees the client's alert after the client has already given up, on its own
        thread, so a test must wait for the count rather than read it at once."""
        with self._changed:
            self._changed.wait_for(lambda: self.refused > more_than, timeout)
            return self.refused

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        try:
            tls = self.context.wrap_socket(conn, server_side=True)
        except (ssl.SSLError, OSError):
            with self._changed:
                self.refused += 1
                self._changed.notify_all()
            conn.close()
            return
        self.served += 1
        engine = socket.socket(socket.AF_UNIX)
        engine.connect(self.socket_path)
        try:
            while True:
                ready, _, _ = select.select([tls, engine], [], [], 30)
                if not ready:
                    return
                if tls in ready or tls.pending():
                    data = tls.recv(65536)
                    if not data:
                        return
                    engine.sendall(data)
                if engine in ready:
                    data = engine.recv(65536)
                    if not data:
                        return
                    tls.sendall(data)
        except OSError:
            return
        finally:
            engine.close()
            tls.close()
