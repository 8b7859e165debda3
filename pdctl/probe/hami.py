"""The probe command for HAMi-core's library on a host (phase 3 on bare metal). I/O only: the
output is parsed by pdctl.facts.hami and judged by pdctl.check.hami."""

from __future__ import annotations

from pdctl.facts.hami import HAMI_LIBRARY
from pdctl.render.template import quote
from pdctl.spec.model import Spec


def library_command(path: str) -> str:
    """POSIX sh: whether the file exists and is readable, then its exported functions from
    `nm -D --defined-only` (`<type> <name>` lines), or, where binutils are not installed, the
    file itself in base64 for pdctl to read (facts.hami.elf_functions). Exits 0 either way."""
    lib = quote(path)
    return (
        f'l={lib}; echo "path: $l"; '
        'if [ ! -e "$l" ]; then echo "exists: no"; exit 0; fi; echo "exists: yes"; '
        'if [ ! -r "$l" ] || [ -d "$l" ]; then echo "readable: no"; exit 0; fi; '
        'echo "readable: yes"; '
        "if command -v nm >/dev/null 2>&1; then "
        'if o=$(nm -D --defined-only "$l" 2>&1); then echo "nm:"; '
        "printf '%s\\n' \"$o\" | awk 'NF >= 3 {print $2, $3}'; "
        'else echo "error: $(printf "%s" "$o" | head -n 1)"; fi; '
        'else echo "base64:"; base64 < "$l" | tr -d "\\n"; echo; fi'
    )


def hami_commands(spec: Spec) -> dict[str, str]:
    """{file: command} for a phase 3 spec on hosts that names a library; else nothing."""
    share = spec.decode.share if spec.decode is not None else None
    if spec.phase != 3 or not spec.hosts or share is None or share.library is None:
        return {}
    return {HAMI_LIBRARY: library_command(share.library)}
