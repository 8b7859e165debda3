#!/bin/bash
root=@ROOT@
env=$(dirname "$(dirname "$0")")
case "$1" in
  -c) cat "$env/installed" 2>/dev/null || true ;;
  -m)
    echo "pip-begin $$" >>"$root/markers"
    sleep 1
    spec=${@: -1}
    echo "${spec#*==}" >"$env/installed"
    echo "pip-end $$" >>"$root/markers" ;;
  *) exec python3 "$@" ;;
esac
