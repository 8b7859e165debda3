"""The shell scripts HostOps runs on a host's deployment folder (pdctl/targets/hosts/remote.py)."""

from __future__ import annotations

import shlex

from pdctl.render.template import render_template

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

# The last lines of every unit's log, each after a line `<mark> <unit>` (mark: a random
# boundary), read with alive()'s observation: the log lines up's live progress shows.
TAILS_BODY = r"""
d=%(dir)s
[ -d "$d" ] || exit 0
for u in "$d"/*/; do
  u=${u%%/}
  [ -f "$u/stop.sh" ] && [ -f "$u/log" ] || continue
  printf '\n%%s %%s\n' %(mark)s "${u##*/}"
  tail -n %(lines)d -- "$u/log"
done
"""
TAIL_AHEAD = 50  # lines of each log read with an observation (see alive)

# Before a unit is replaced, its scripts (every file but the runtime ones) are copied to
# `<unit>/previous/`; a failed replacement copies them back and starts that version again.
SAVE_PREVIOUS = r"""
u=%(dir)s
rm -rf -- "$u/previous"
mkdir -m 700 -- "$u/previous"
for f in "$u"/*; do
  [ -f "$f" ] || continue
  case ${f##*/} in pid|log|container-id|*.pdctl-tmp) continue ;; esac
  cp -p -- "$f" "$u/previous/"
done
"""
RESTORE_PREVIOUS = r"""
u=%(dir)s
[ -f "$u/previous/start.sh" ] || { echo "no previous version kept in $u/previous" >&2; exit 1; }
cp -p -- "$u"/previous/* "$u/"
"""


def observe_script(folder: str) -> str:
    """The observe script for a deployment folder (an absolute path on the host)."""
    owned = render_template("process-owned.sh.j2")
    return owned + OBSERVE_BODY % {"dir": shlex.quote(folder)}
