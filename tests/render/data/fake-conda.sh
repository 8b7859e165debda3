#!/bin/bash
# A stand-in conda: `shell.bash hook` defines the `conda` shell function, as the real one does.
root=$(cd "$(dirname "$0")/.." && pwd)
case "$1" in
  shell.bash) cat <<EOF
conda() {
  case "\$1" in
    env) echo "# conda environments:"; echo "base  $root"; ls "$root/envs" 2>/dev/null ;;
    create) mkdir -p "$root/envs/\$3/bin"; printf '#!/bin/sh\necho 0.33.0\n' \
              >"$root/envs/\$3/bin/python"; chmod +x "$root/envs/\$3/bin/python" ;;
    activate) [ -d "$root/envs/\$2" ] || return 1; export CONDA_DEFAULT_ENV="\$2";
              export PATH="$root/envs/\$2/bin:\$PATH" ;;
  esac
}
EOF
  ;;
esac
