"""Operations on one host's deployment folder over a reused SSH connection."""

from __future__ import annotations

import shlex
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from pdctl.errors import PdctlError
from pdctl.render.bundle import Artifact
from pdctl.render.host_scripts import HostScripts, with_vars
from pdctl.targets.batch import new_boundary, run_batch
from pdctl.targets.health import API_KEY_ENV, Health, api_key_of, port_problem, probe
from pdctl.targets.outcome import NoLog, last_line
from pdctl.targets.ssh import Connection, HostLost, Result, makedirs, put_file
from pdctl.targets.state import Observed, parse_observed

NO_LOG_RC = 3  # what a unit's log command exits with when the unit has no log
TAIL_AHEAD = 50  # lines of each log read with an observation (see alive)
RELEASE_WAIT = 5.0  # seconds release() waits for the host to let go of the run lock


class HostOps:
    """Upload, start, stop, observe and probe the units of one deployment on one host, with the
    scripts of its bundle (Bundle.scripts: rendered before anything runs)."""

    def __init__(self, conn: Connection, deploy_dir: str, scripts: HostScripts) -> None:
        self.conn = conn
        self.scripts = scripts
        self.dir = conn.expand(deploy_dir)
        if not self.dir.startswith("/") or self.dir.rstrip("/").count("/") < 1:
            raise PdctlError(f"host {conn.host.name}: unsafe deployment folder {self.dir!r}")
        self._api_key: str | None = None  # the engines' API key, once known (see api_key)
        self._key_known = False
        # alive(): one observation answers every unit once (a poll round over several units
        # on this host costs one exec); asking a unit again, or starting/stopping, re-reads.
        self._seen: dict[str, bool] | None = None
        self._asked: set[str] = set()
        self._seen_lock = threading.Lock()
        self._tails: dict[str, str] = {}  # unit -> its log's last lines, read with _seen
        # survey(): port-owner listings read ahead, (unit, port) -> listing, used once
        self._owners: dict[tuple[str, int], str] = {}
        self._lock: Any = None  # the channel holding the run lock (run_lock.py), while held

    @property
    def name(self) -> str:
        return self.conn.host.name

    def unit_dir(self, unit: str) -> str:
        return f"{self.dir}/{unit}"

    def _port_owner(self, unit: str, port: int) -> str:
        """Who listens on `port` (the bundle's port-owner script, for `unit`)."""
        unit_dir = self.unit_dir(unit)
        return with_vars(self.scripts.port_owner, unit_dir=unit_dir, name=unit, port=port)

    def lock(self) -> list[Observed]:
        """Take the deployment's run lock on this host (held until release() or the
        connection ends) and read what runs under it (one exec); PdctlError when another
        `up`/`down` holds it."""
        from pdctl.targets.hosts.run_lock import take

        self.release()
        self._lock, text = take(self.conn, self.dir, self._observe())
        return parse_observed(self.name, text)

    def release(self) -> None:
        """Let go of the run lock and wait (a few seconds at most) until the host has: the
        holder ends at the end of its input, so a `down` run right after this `up` returns
        finds the lock free instead of being refused."""
        if self._lock is not None:
            try:
                self._lock.shutdown_write()
                self._lock.status_event.wait(RELEASE_WAIT)
                self._lock.close()
            except Exception:  # closing a dead channel: the lock went with the connection
                pass
            self._lock = None

    def _observe(self) -> str:
        return with_vars(self.scripts.observe, d=self.dir)

    def observe(self) -> list[Observed]:
        res = self.conn.run(self._observe(), timeout=60, step="reading what runs")
        return self._observed(res)

    def _observed(self, res: Result) -> list[Observed]:
        if res.rc != 0:
            raise PdctlError(f"host {self.name}: cannot read {self.dir}: {res.err.strip()}")
        return parse_observed(self.name, res.out)

    def survey(self, ports: Sequence[tuple[str, int]]) -> list[Observed]:
        """observe(), and ahead of the health probes the port-owner listing of each (unit,
        port) and the secrets file's API key, in ONE exec (`status`: a slow ~/.bashrc is paid
        once per host). The listings are used by the next probe of that unit and port."""
        owners = [(u, p) for u, p in ports]
        cmds = [self._observe()]
        cmds += [self._port_owner(u, p) for u, p in owners]
        if not self._key_known:
            secrets = shlex.quote(f"{self.dir}/secrets.env")
            cmds.append(f"if [ -e {secrets} ]; then cat -- {secrets}; fi")
        results = run_batch(self.conn, cmds, timeout=60, step="reading what runs")
        for res in results:
            if isinstance(res, HostLost):
                raise res
        first = results[0]
        if isinstance(first, PdctlError):
            raise first
        found = self._observed(first)
        for (u, p), res in zip(owners, results[1:], strict=False):
            if isinstance(res, Result):
                self._owners[(u, p)] = res.out
        if not self._key_known:
            last = results[-1]
            if isinstance(last, Result) and last.rc == 0:
                self._api_key, self._key_known = api_key_of(last.out), True
        return found

    def prepare(self, secrets: dict[str, str]) -> None:
        """The deployment folder (0700) and its secrets file (0600, only when there are any)."""
        self._api_key, self._key_known = secrets.get(API_KEY_ENV), True
        with self.sftp("writing the deployment folder") as sftp:
            makedirs(sftp, self.dir, 0o700)
            path = f"{self.dir}/secrets.env"
            if secrets:
                body = "".join(f"{k}={shlex.quote(v)}\n" for k, v in sorted(secrets.items()))
                put_file(sftp, path, body.encode(), 0o600)
            else:
                try:
                    sftp.remove(path)
                except FileNotFoundError:
                    pass

    def upload(self, files: list[Artifact], prefix: str) -> None:
        """Write artifacts whose paths start with `prefix` into the deployment folder."""
        with self.sftp("uploading scripts") as sftp:
            for artifact in files:
                rel = artifact.path[len(prefix) :].lstrip("/")
                path = f"{self.dir}/{rel}"
                makedirs(sftp, path.rsplit("/", 1)[0], 0o700)
                mode = 0o700 if artifact.executable else 0o600
                put_file(sftp, path, artifact.text.encode(), mode)

    @contextmanager
    def sftp(self, step: str) -> Iterator[Any]:
        """An SFTP session; a timeout or a dropped connection becomes HostLost naming `step`,
        any other failure one PdctlError line."""
        import paramiko

        sftp = self.conn.sftp(step)
        try:
            yield sftp
        except (TimeoutError, EOFError, paramiko.SSHException) as exc:
            raise self.conn.fail(step, exc) from None
        except OSError as exc:
            transport = sftp.get_channel().get_transport()
            if not transport.is_active():
                raise self.conn.fail(step, exc) from None
            why = f"{exc.strerror or exc} (in {self.dir})"
            # SFTP's status text is generic ("Failure" for a read-only or a full filesystem
            # alike): the same kind of write over exec tells the cause.
            folder = shlex.quote(self.dir)
            try:
                res = self.conn.run(
                    f"export LC_ALL=C; mkdir -p -- {folder} && "
                    f"t=$(mktemp -p {folder} .pdctl-write.XXXXXX) && "
                    f'{{ printf x >"$t"; rc=$?; rm -f -- "$t"; exit $rc; }}',
                    timeout=60, step=f"{step} (asking why it failed)",
                )
                told = last_line(res.err).rsplit(": ", 1)[-1] if res.rc != 0 else ""
            except PdctlError:  # the host went away meanwhile: SFTP's word is all there is
                told = ""
            if told:
                why = f"cannot write {self.dir}: {told}"
            raise PdctlError(f"{self.conn.where()}: {step}: {why}") from None
        finally:
            try:
                sftp.close()
            except Exception:  # closing a dead session: nothing left to do
                pass

    def forget(self) -> None:
        """Drop what alive() and survey() read ahead (something was started or stopped)."""
        with self._seen_lock:
            self._seen = None
            self._tails = {}
        self._owners.clear()

    def start(self, unit: str) -> tuple[bool, str]:
        self.forget()
        res = self.conn.run(
            f"bash {shlex.quote(self.unit_dir(unit) + '/start.sh')}", timeout=1800,
            step=f"starting {unit}",
        )
        return res.rc == 0, (res.out + res.err).strip()

    def stop(self, unit: str) -> tuple[bool, str]:
        self.forget()
        script = self.unit_dir(unit) + "/stop.sh"
        quoted = shlex.quote(script)
        res = self.conn.run(
            f"[ ! -f {quoted} ] || bash {quoted}", timeout=600, step=f"stopping {unit}"
        )
        return res.rc == 0, (res.out + res.err).strip()

    def save_previous(self, unit: str) -> None:
        """Keep the unit's current scripts in `<unit>/previous/` (before replacing them)."""
        script = with_vars(self.scripts.save_previous, u=self.unit_dir(unit))
        res = self.conn.run(script, timeout=60, step=f"keeping the running version of {unit}")
        if res.rc != 0:
            raise PdctlError(
                f"{self.conn.where()}: cannot keep the running version of {unit}: {res.err.strip()}"
            )

    def restore_previous(self, unit: str) -> None:
        """Put the scripts kept by save_previous back in place."""
        script = with_vars(self.scripts.restore_previous, u=self.unit_dir(unit))
        res = self.conn.run(script, timeout=60, step=f"restoring the previous version of {unit}")
        if res.rc != 0:
            raise PdctlError(f"{self.conn.where()}: cannot restore {unit}: {res.err.strip()}")

    def remove_unit(self, unit: str) -> None:
        self.conn.run(
            f"rm -rf -- {shlex.quote(self.unit_dir(unit))}", timeout=60, step=f"removing {unit}"
        )

    def alive(self, unit: str) -> bool:
        """Whether the unit's process runs. One observation answers each unit once: polling
        several units of this host in turn costs one exec per round, not one per unit."""
        with self._seen_lock:
            if self._seen is None or unit in self._asked:
                self._look()
                self._asked = set()
            self._asked.add(unit)
            assert self._seen is not None
            return self._seen.get(unit, False)

    def ended(self, unit: str) -> str:
        return "the process exited"

    def _look(self) -> None:
        """One exec: what runs, and the last TAIL_AHEAD lines of every unit's log (the next
        tail() of each unit reads them instead of the host)."""
        mark = new_boundary()
        tails = with_vars(self.scripts.tails, d=self.dir, mark=mark, lines=TAIL_AHEAD)
        cmds = [self._observe(), tails]
        results = run_batch(self.conn, cmds, timeout=60, step="reading what runs")
        for res in results:
            if isinstance(res, HostLost):
                raise res
        if isinstance(results[0], PdctlError):
            raise results[0]
        self._seen = {obs.name: obs.running for obs in self._observed(results[0])}
        self._tails = {}
        if isinstance(results[1], Result) and results[1].rc == 0:
            for chunk in results[1].out.split("\n" + mark + " ")[1:]:
                name, _, text = chunk.partition("\n")
                self._tails[name] = text

    def tail(self, unit: str, lines: int = 20) -> str:
        """The last lines of a unit's log for up's progress and failure reports: '' when it
        has none (never raises NoLog)."""
        with self._seen_lock:
            ahead = self._tails.pop(unit, None) if 0 < lines <= TAIL_AHEAD else None
        if ahead is not None:
            return "".join(ahead.splitlines(keepends=True)[-lines:])
        return self.tails([unit], lines, missing_ok=True)[unit]

    def _log_command(self, unit: str, lines: int, follow: bool) -> str:
        """Shell printing a unit's log: its `log` file (a process), or on a `runtime: docker`
        host the container's log when the unit folder names one; with neither it exits
        NO_LOG_RC, silently."""
        folder = shlex.quote(self.unit_dir(unit))
        log = shlex.quote(self.unit_dir(unit) + "/log")
        n = int(lines)
        tail = f"exec tail -n {n} -F -- {log}" if follow else f"tail -n {n} -- {log}"
        unit_file = shlex.quote(self.unit_dir(unit) + "/systemd")
        journal = "exec journalctl -f" if follow else "journalctl"
        cmd = (  # a systemd unit: its journal (a user unit's by --user-unit)
            f"if [ -s {unit_file} ]; then read -r sc sv <{unit_file}; "
            f'if [ "$sc" = user ]; then o=--user-unit; else o=-u; fi; '
            f'{journal} "$o" "$sv" -n {n} -o cat --no-pager; '
            f"elif [ -f {log} ]; then {tail}; "
        )
        if self.conn.host.runtime == "docker":
            docker = "exec docker logs -f" if follow else "docker logs"
            cmd += (
                f"elif [ -f {folder}/container-id ]; then "
                f"{docker} --tail {n} {shlex.quote(unit)} 2>&1; "
            )
        return cmd + f"else exit {NO_LOG_RC}; fi"

    def tails(self, units: list[str], lines: int = 20, missing_ok: bool = False) -> dict[str, str]:
        """The last `lines` of each unit's log, in ONE exec; a log too slow to read says so
        instead of failing; HostLost when the connection dies. A unit without a log (never
        started, or removed by down) raises NoLog, and a log that cannot be read (Docker's
        log of a container that is gone) a PdctlError; with `missing_ok` they read '' and the
        reader's output."""
        cmds = [self._log_command(unit, lines, follow=False) for unit in units]
        step = "reading the log of " + ", ".join(units)
        out, missing = {}, []
        for unit, res in zip(units, run_batch(self.conn, cmds, timeout=60, step=step), strict=True):
            if isinstance(res, HostLost):
                raise res
            if isinstance(res, Result) and res.rc == NO_LOG_RC:
                missing.append(unit)
                out[unit] = ""
            elif isinstance(res, Result) and res.rc != 0 and not missing_ok:
                why = (res.out + res.err).strip().splitlines() or [f"exit status {res.rc}"]
                raise PdctlError(f"{unit} on {self.name}: cannot read the log: {why[-1]}")
            else:
                out[unit] = res.line() if isinstance(res, PdctlError) else res.out
        if missing and not missing_ok:
            raise NoLog(missing, self.name)
        return out

    def follow(self, unit: str, write: Any, lines: int = 50) -> None:
        if self.conn.stream(self._log_command(unit, lines, follow=True), write) == NO_LOG_RC:
            raise NoLog([unit], self.name)

    def probe(
        self, port: int, model: str, path: str = "/health", unit: str | None = None,
        address: str = "127.0.0.1",
    ) -> Health:
        """Health of the server on `address`:`port` as seen on the host; with `unit`, the port
        must be that unit's."""

        ahead = self._owners.pop((unit, port), None) if unit is not None else None

        def owner() -> str | None:
            assert unit is not None
            listing = ahead
            if listing is None:
                script = self._port_owner(unit, port)
                res = self.conn.run(script, timeout=60, step="checking who holds the port")
                listing = res.out
            return port_problem(listing, port, self.name, unit)

        return probe(
            lambda: self.conn.open_channel(port, address), model, path, api_key=self.api_key(),
            owner=owner if unit is not None else None, where=f"{address}:{port}",
        )

    def api_key(self) -> str | None:
        """The API key the engines require (secrets.apiKey): the one `up` wrote, else the one
        in the host's 0600 secrets file (what the running engines read), read over SFTP."""
        if not self._key_known:
            with self.sftp("reading the secrets file") as sftp:
                try:
                    with sftp.open(f"{self.dir}/secrets.env", "r") as fh:
                        text = fh.read().decode("utf-8", "replace")
                except FileNotFoundError:
                    text = ""  # no secrets file: no key
            self._api_key, self._key_known = api_key_of(text), True
        return self._api_key
