#!/bin/bash
root=@ROOT@
case "$1" in
  shell.bash)
    echo "conda() { case \"\$1\" in activate) export PATH=\"$root/envs/\$2/bin:\$PATH\" ;; *) \"$root/bin/conda\" \"\$@\" ;; esac; }" ;;
  env) for d in "$root"/envs/*/; do [ -d "$d" ] && basename "$d"; done; true ;;
  create)
    echo "create-begin $$" >>"$root/markers"
    sleep 2
    mkdir -p "$root/envs/$3/bin"
    cp "$root/python" "$root/envs/$3/bin/python"
    cp "$root/vllm" "$root/envs/$3/bin/vllm"
    echo "create-end $$" >>"$root/markers" ;;
  *) echo "fake conda: $*" >&2; exit 2 ;;
esac
