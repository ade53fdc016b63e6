"""Test certificate authorities made by the real ``openssl`` CLI (not by the code under test).

ca = TestCa.create(tmp_path / "ca", "GLM test CA")
cert, key = ca.issue(["DNS:glm-front.test", "IP:127.0.0.2"])
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path


def _openssl(cwd: Path, *args: str) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True, timeout=60)


@dataclass(frozen=True)
class TestCa:
    """A CA on disk: ``ca.crt`` (its certificate) and ``ca.key``; it signs server certificates."""

    __test__ = False  # not a pytest class
    folder: Path

    @classmethod
    def create(cls, folder: Path, name: str) -> TestCa:
        folder.mkdir(parents=True, exist_ok=True)
        _openssl(
            folder, "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
            "-keyout", "ca.key", "-out", "ca.crt", "-days", "2", "-subj", f"/CN={name}",
            "-addext", "basicConstraints=critical,CA:TRUE",
            "-addext", "keyUsage=critical,keyCertSign,cRLSign",
        )  # fmt: skip
        return cls(folder)

    @property
    def certificate(self) -> str:
        return (self.folder / "ca.crt").read_text()

    def issue(self, alt_names: list[str], label: str = "server") -> tuple[str, str]:
        """(certificate PEM, key PEM) for a server whose subjectAltName is ``alt_names``
        (``DNS:…``/``IP:…``, OpenSSL's syntax; none: no subjectAltName at all)."""
        ext = self.folder / f"{label}.ext"
        lines = ["basicConstraints=critical,CA:FALSE", "extendedKeyUsage=serverAuth"]
        if alt_names:
            lines.append(f"subjectAltName={','.join(alt_names)}")
        ext.write_text("\n".join(lines) + "\n")
        _openssl(
            self.folder, "req", "-new", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256",
            "-nodes", "-keyout", f"{label}.key", "-out", f"{label}.csr", "-subj", f"/CN={label}",
        )  # fmt: skip
        _openssl(
            self.folder, "x509", "-req", "-in", f"{label}.csr", "-CA", "ca.crt", "-CAkey", "ca.key",
            "-CAcreateserial", "-out", f"{label}.crt", "-days", "1", "-extfile", ext.name,
        )  # fmt: skip
        return (self.folder / f"{label}.crt").read_text(), (self.folder / f"{label}.key").read_text()


def self_signed(folder: Path, alt_names: list[str]) -> tuple[str, str]:
    """(certificate PEM, key PEM) of a self-signed server certificate (no CA behind it)."""
    folder.mkdir(parents=True, exist_ok=True)
    _openssl(
        folder, "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
        "-keyout", "self.key", "-out", "self.crt", "-days", "1", "-subj", "/CN=self-signed",
        "-addext", f"subjectAltName={','.join(alt_names)}", "-addext", "basicConstraints=critical,CA:FALSE",
    )  # fmt: skip
    return (folder / "self.crt").read_text(), (folder / "self.key").read_text()
