"""The scripts pdctl runs on a host to read and handle a deployment's units over SSH
(pdctl.targets.hosts.remote): rendered with the bundle (Bundle.scripts), not while applying.
Each takes its inputs as shell variables the caller sets before it (`with_vars`, every value
quoted), so the target supplies values and renders nothing."""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from functools import cache

from pdctl.render.template import render_template

# Lines `unit<TAB>hash<TAB>state<TAB>pid<TAB>restarts<TAB>supervisor<TAB>age` for every unit
# folder of the deployment folder $d. state: running, stopped, a systemd unit's `auto-restart`
# (between restarts) or `failed:<Result>` (e.g. failed:start-limit-hit), or `gone` (a process
# unit whose recorded server process died while others of its group live on). supervisor:
# systemd, nohup or docker. restarts: a container's RestartCount or a systemd unit's NRestarts.
# age: the seconds a running process unit's server has run. A recorded pid counts as running
# only by the rule start.sh and stop.sh use (templates/process-owned.sh.j2, rendered before this
# body): a process of its group runs in the unit's folder. A stale pid file (after a crash or
# reboot, the number reused by someone else) reads as stopped; a server that exited but is not
# reaped yet (a zombie) reads as gone.
OBSERVE_BODY = r"""
[ -d "$d" ] || exit 0
for u in "$d"/*/; do
  u=${u%/}; n=${u##*/}
  [ -f "$u/stop.sh" ] || continue
  h=$(sha256sum "$u/start.sh" 2>/dev/null | cut -c1-16)
  s=stopped; p=-; r=-; m=nohup
  if [ -s "$u/systemd" ] && command -v systemctl >/dev/null; then
    m=systemd; as=; ss=; rs=; mp=0; lb=0
    read -r sc sv <"$u/systemd"
    if [ "$sc" = user ]; then
      o=--user; export XDG_RUNTIME_DIR="${XDG_RUNTIME_DIR:-/run/user/$(id -u)}"
    else
      o=--system
    fi
    while IFS='=' read -r k v; do
      case $k in ActiveState) as=$v ;; SubState) ss=$v ;; Result) rs=$v ;;
        NRestarts) r=$v ;; MainPID) mp=$v ;; StartLimitBurst) lb=$v ;; esac
    done < <(systemctl "$o" show -p ActiveState -p SubState -p Result -p NRestarts -p MainPID \
      -p StartLimitBurst -- "$sv" 2>/dev/null)
    # systemd 252 keeps the last exit's Result when an automatic restart hits the start limit:
    # failed after StartLimitBurst starts is the limit.
    if [ "$as" = failed ] && [ "$((${r:-0} + 1))" -ge "${lb:-0}" ] && [ "${lb:-0}" -gt 0 ]; then
      rs=start-limit-hit
    fi
    case $as in
      active) if [ "$mp" != 0 ]; then s=running; p=$mp; fi ;;
      activating) s=$ss ;;
      failed) s=failed:$rs ;;
    esac
  elif [ -s "$u/pid" ]; then
    p=$(cat "$u/pid")
    unit_dir=$u
    if owned "$p"; then
      s=running
      # The recorded process (the API server) is gone while others of its group live on: a
      # unit that can no longer answer, which `up` restarts.
      runs "$p" || s=gone
    fi
  elif [ -f "$u/container-id" ] && command -v docker >/dev/null; then
    c=$(cut -c1-12 "$u/container-id")
    i=$(docker inspect -f '{{.State.Running}} {{.RestartCount}}' "$n" 2>/dev/null)
    r=${i#* }
    if [ "${i%% *}" = true ]; then
      s=running; p=$c
    fi
  fi
  [ -f "$u/container-id" ] && m=docker
  a=-  # how long a process unit's server has run, in seconds
  if [ "$m" != docker ] && [ "$s" = running ]; then
    a=$(ps -o etimes= -p "$p" 2>/dev/null | tr -d ' '); a=${a:--}
  fi
  printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$n" "${h:--}" "$s" "$p" "${r:--}" "$m" "$a"
done
"""

# The last $lines lines of every unit's log in $d, each after a line `$mark <unit>` (mark: a
# random boundary), read with alive()'s observation: the log lines up's live progress shows.
TAILS = r"""
[ -d "$d" ] || exit 0
for u in "$d"/*/; do
  u=${u%/}
  [ -f "$u/stop.sh" ] || continue
  if [ -s "$u/systemd" ]; then
    read -r sc sv <"$u/systemd"
    printf '\n%s %s\n' "$mark" "${u##*/}"
    if [ "$sc" = user ]; then
      journalctl --user-unit "$sv" -n "$lines" -o cat --no-pager 2>/dev/null
    else
      journalctl -u "$sv" -n "$lines" -o cat --no-pager 2>/dev/null
    fi
    continue
  fi
  [ -f "$u/log" ] || continue
  printf '\n%s %s\n' "$mark" "${u##*/}"
  tail -n "$lines" -- "$u/log"
done
"""

# Before a unit ($u: its folder) is replaced, its scripts (every file but the runtime ones)
# are copied to `$u/previous/`; a failed replacement copies them back and starts that version
# again.
SAVE_PREVIOUS = r"""
rm -rf -- "$u/previous"
mkdir -m 700 -- "$u/previous"
for f in "$u"/*; do
  [ -f "$f" ] || continue
  case ${f##*/} in pid|log|log.[0-9]*|container-id|systemd|*.pdctl-tmp) continue ;; esac
  cp -p -- "$f" "$u/previous/"
done
"""
RESTORE_PREVIOUS = r"""
[ -f "$u/previous/start.sh" ] || { echo "no previous version kept in $u/previous" >&2; exit 1; }
cp -p -- "$u"/previous/* "$u/"
"""


@dataclass(frozen=True)
class HostScripts:
    """observe ($d: the deployment folder), port_owner ($unit_dir, $name, $port: who listens
    on a unit's port, templates/port-owner.sh.j2), tails ($d, $mark, $lines), save_previous
    and restore_previous ($u: a unit's folder)."""

    observe: str
    port_owner: str
    tails: str
    save_previous: str
    restore_previous: str


@cache
def host_scripts() -> HostScripts:
    return HostScripts(
        observe=render_template("process-owned.sh.j2") + OBSERVE_BODY,
        port_owner=render_template("port-owner.sh.j2"), tails=TAILS, save_previous=SAVE_PREVIOUS,
        restore_previous=RESTORE_PREVIOUS,
    )


def with_vars(script: str, **values: str | int) -> str:
    """`script` after one `NAME=VALUE` line per value (quoted for sh)."""
    return "".join(f"{k}={shlex.quote(str(v))}\n" for k, v in values.items()) + script
