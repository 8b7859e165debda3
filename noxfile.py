"""Developer tasks: `nox` runs lint, typecheck, tests and e2e in one virtualenv (session `ci`);
the sessions of each step stay for running one; `nox -s bench` the benchmarks."""

from __future__ import annotations

import nox

nox.options.sessions = ["ci"]
nox.options.reuse_existing_virtualenvs = True

PYTHON = None  # the interpreter nox runs under


TOOLS = ("ruff>=0.6", "mypy>=1.10", "types-PyYAML", "types-paramiko")


@nox.session(python=PYTHON)
def ci(session: nox.Session) -> None:
    """Everything CI runs, installed once: lint, types, unit tests on two workers (modules that
    share a test service on one: tests/conftest.py's SHARED), the `alone` ones after them on
    their own, then e2e (slowest tests listed, so a slow one shows in the log)."""
    session.install("-e", ".[test]", *TOOLS)
    session.run("ruff", "check", "pdctl", "tests", "benchmarks", "noxfile.py")
    session.run("mypy", "pdctl")
    unit = ("-m", "not e2e and not alone", "-n", "2", "--dist", "loadgroup", "--durations=15")
    session.run("pytest", *unit, *session.posargs)
    # supervision timing (restart windows of seconds) is checked with nothing running beside it
    session.run("pytest", "-m", "alone and not e2e", *session.posargs)
    session.run("pytest", "-m", "e2e", "--durations=40", *session.posargs)


@nox.session(python=PYTHON)
def lint(session: nox.Session) -> None:
    """ruff over the code, shellcheck over every rendered script (via the tests)."""
    session.install("ruff>=0.6")
    session.run("ruff", "check", "pdctl", "tests", "benchmarks", "noxfile.py")


@nox.session(python=PYTHON)
def typecheck(session: nox.Session) -> None:
    session.install("-e", ".", "mypy>=1.10", "types-PyYAML", "types-paramiko")
    session.run("mypy", "pdctl")


@nox.session(python=PYTHON)
def tests(session: nox.Session) -> None:
    """Unit and integration tests (real sshd/dockerd when .ci/run started them)."""
    session.install("-e", ".[test]")
    session.run("pytest", "-m", "not e2e", *session.posargs)


@nox.session(python=PYTHON)
def e2e(session: nox.Session) -> None:
    """End-to-end tests: a real vLLM (CPU build) started by `pdctl up` over SSH."""
    session.install("-e", ".[test]")
    session.run("pytest", "-m", "e2e", *session.posargs)


@nox.session(python=PYTHON)
def docs(session: nox.Session) -> None:
    """Regenerate docs/spec-reference.md from the models."""
    session.install("-e", ".")
    session.run("python", "-m", "pdctl.docgen", "docs/spec-reference.md")


@nox.session(python=PYTHON)
def bench(session: nox.Session) -> None:
    """Benchmarks: writes benchmarks/RESULTS.md. pdctl is installed as users get it (a regular,
    byte-compiled install, not editable), so start-up figures are not inflated by compiling
    pdctl's sources on every run."""
    session.install(".[test]")
    session.run("python", "benchmarks/run.py", *session.posargs)


@nox.session(python=PYTHON)
def golden(session: nox.Session) -> None:
    """Rewrite the golden files after an intended rendering change (review the diff)."""
    session.install("-e", ".[test]")
    session.run("pytest", "tests/test_golden.py", "--update-golden")
