"""Options shared by several commands."""

from __future__ import annotations

from typing import Any

import typer

from pdctl.errors import UsageError

SPEC = typer.Argument(..., help="Spec file, or - for stdin.")
PHASE = typer.Option(None, "--phase", "-p", help="Render at this phase instead of the spec's.")
TARGET = typer.Option(
    None, "--target", help="hosts or kubernetes (phase 2 only; default from the spec)."
)


def check_phase_target(phase: int | None, target: str | None) -> None:
    if phase is not None and phase not in (0, 1, 2, 3):
        raise UsageError(f"--phase must be 0, 1, 2 or 3 (got {phase})")
    if target is not None and target not in ("hosts", "kubernetes"):
        raise UsageError(f"--target must be hosts or kubernetes (got {target!r})")


DOCKER_TLS = typer.Option(
    False,
    "--docker-tls",
    help="With a tcp:// --docker-url: TLS, verifying the engine's certificate against ca.pem and "
    "presenting cert.pem/key.pem from --docker-cert-path (as `docker --tlsverify` does).",
)
DOCKER_CERT_PATH = typer.Option(
    None,
    "--docker-cert-path",
    envvar="DOCKER_CERT_PATH",
    help="Folder holding ca.pem, cert.pem and key.pem for --docker-tls (default ~/.docker).",
)
INSECURE_DOCKER = typer.Option(
    False,
    "--insecure-docker",
    help="Allow a plain tcp:// --docker-url: the Docker API, HF_TOKEN and the API key travel "
    "unencrypted and unauthenticated. Only on a network you trust.",
)


def docker_access(tls: bool, cert_path: str | None, insecure: bool, ssh: Any) -> Any:
    """What --docker-tls, --docker-cert-path, --insecure-docker and the SSH options say about
    reaching Docker engines (targets/docker_transport.py decides with it)."""
    from pdctl.targets.docker_transport import DEFAULT_CERT_PATH, DockerAccess

    return DockerAccess(
        tls=tls, cert_path=cert_path or DEFAULT_CERT_PATH, insecure=insecure, ssh=ssh
    )
