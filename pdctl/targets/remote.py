"""Operations on one host's deployment folder over a reused SSH connection."""

from __future__ import annotations

import shlex
from typing import Any

from pdctl.errors import PdctlError
from pdctl.render.bundle import Artifact
from pdctl.render.template import render_template
from pdctl.targets.health import Health, probe
from pdctl.targets.ssh import Connection, makedirs, put_file
from pdctl.targets.state import Observed, parse_observed

# Lines `unit<TAB>hash<TAB>running|stopped<TAB>pid` for every unit folder. A recorded pid
# counts as running only by the rule start.sh and stop.sh use (templates/process-owned.sh.j2,
# rendered into this script): a process of its group runs in the unit's folder. A stale pid
# file (after a crash or reboot, the number reused by someone else) reads as stopped.
OBSERVE_BODY = r"""
d=%(dir)s
[ -d "$d" ] || exit 0
for u in "$d"/*/; do
  u=${u%%/}; n=${u##*/}
  [ -f "$u/stop.sh" ] || continue
  h=$(sha256sum "$u/start.sh" 2>/dev/null | cut -c1-16)
  s=stopped; p=-
  if [ -s "$u/pid" ]; then
    p=$(cat "$u/pid")
    unit_dir=$u
    if owned "$p"; then s=running; fi
  elif [ -f "$u/container-id" ] && command -v docker >/dev/null; then
    c=$(cut -c1-12 "$u/container-id")
    if [ "$(docker inspect -f '{{.State.Running}}' "$n" 2>/dev/null)" = true ]; then
      s=running; p=$c
    fi
  fi
  printf '%%s\t%%s\t%%s\t%%s\n' "$n" "${h:--}" "$s" "$p"
done
"""


def observe_script(folder: str) -> str:
    """The observe script for a deployment folder (an absolute path on the host)."""
    owned = render_template("process-owned.sh.j2")
    return owned + OBSERVE_BODY % {"dir": shlex.quote(folder)}


class HostOps:
    """Upload, start, stop, observe and probe the units of one deployment on one host."""

    def __init__(self, conn: Connection, deploy_dir: str) -> None:
        self.conn = conn
        self.dir = conn.expand(deploy_dir)
        if not self.dir.startswith("/") or self.dir.rstrip("/").count("/") < 1:
            raise PdctlError(f"host {conn.host.name}: unsafe deployment folder {self.dir!r}")

    @property
    def name(self) -> str:
        return self.conn.host.name

    def unit_dir(self, unit: str) -> str:
        return f"{self.dir}/{unit}"

    def observe(self) -> list[Observed]:
        res = self.conn.run(observe_script(self.dir), timeout=60)
        if res.rc != 0:
            raise PdctlError(f"host {self.name}: cannot read {self.dir}: {res.err.strip()}")
        return parse_observed(self.name, res.out)

    def prepare(self, secrets: dict[str, str]) -> None:
        """The deployment folder (0700) and its secrets file (0600, only when there are any)."""
        sftp = self.conn.sftp()
        try:
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
        finally:
            sftp.close()

    def upload(self, files: list[Artifact], prefix: str) -> None:
        """Write artifacts whose paths start with `prefix` into the deployment folder."""
        sftp = self.conn.sftp()
        try:
            for artifact in files:
                rel = artifact.path[len(prefix):].lstrip("/")
                path = f"{self.dir}/{rel}"
                makedirs(sftp, path.rsplit("/", 1)[0], 0o700)
                mode = 0o700 if artifact.executable else 0o600
                put_file(sftp, path, artifact.text.encode(), mode)
        finally:
            sftp.close()

    def start(self, unit: str) -> tuple[bool, str]:
        res = self.conn.run(f"bash {shlex.quote(self.unit_dir(unit) + '/start.sh')}", timeout=1800)
        return res.rc == 0, (res.out + res.err).strip()

    def stop(self, unit: str) -> tuple[bool, str]:
        script = self.unit_dir(unit) + "/stop.sh"
        quoted = shlex.quote(script)
        res = self.conn.run(f"[ ! -f {quoted} ] || bash {quoted}", timeout=600)
        return res.rc == 0, (res.out + res.err).strip()

    def remove_unit(self, unit: str) -> None:
        self.conn.run(f"rm -rf -- {shlex.quote(self.unit_dir(unit))}", timeout=60)

    def remove_all(self, data_dir: str) -> None:
        """Remove the deployment folder, and the data folder too when it is then empty."""
        base = self.conn.expand(data_dir).rstrip("/")
        self.conn.run(
            f"rm -rf -- {shlex.quote(self.dir)}; rmdir -- {shlex.quote(base)} 2>/dev/null || true",
            timeout=60,
        )

    def alive(self, unit: str) -> bool:
        for obs in self.observe():
            if obs.name == unit:
                return obs.running
        return False

    def tail(self, unit: str, lines: int = 20) -> str:
        log = self.unit_dir(unit) + "/log"
        cmd = (
            f"if [ -f {shlex.quote(log)} ]; then tail -n {lines} {shlex.quote(log)}; "
            f"else docker logs --tail {lines} {shlex.quote(unit)} 2>&1 || true; fi"
        )
        return self.conn.run(cmd, timeout=60).out

    def follow(self, unit: str, write: Any, lines: int = 50) -> None:
        log = self.unit_dir(unit) + "/log"
        cmd = (
            f"if [ -f {shlex.quote(log)} ]; then exec tail -n {lines} -F {shlex.quote(log)}; "
            f"else exec docker logs -f --tail {lines} {shlex.quote(unit)}; fi"
        )
        self.conn.stream(cmd, write)

    def probe(self, port: int, model: str, path: str = "/health") -> Health:
        return probe(lambda: self.conn.open_channel(port), model, path)
