#!/usr/bin/env bash
# Pack wheels the GPU machine's image lacks beyond pack.sh's vLLM (Mooncake's transfer engine,
# vllm-router) into pieces the device tool can carry beside the working tree (at most 48 MiB
# each), for h200.sh `stash` and `wheels`. Run where PyPI is reachable:
#   bash tests/gpu/pack_wheels.sh [OUT] [REQUIREMENT ...]
# Writes OUT/1/wheels.tar.aa, OUT/2/wheels.tar.ab, ... and WHEELS.SHA256SUM in the last folder:
# carry one folder per call, then `h200.sh wheels` joins, checks and installs them (--no-deps:
# what they need is in the image or in pack.sh's parts).
set -euo pipefail
OUT=${1:-.work/gpu-wheels}
shift || true
want=("$@")
# orjson: vllm-router's launch_router imports mini_lb, which imports orjson at module level, and
# neither the image nor pack.sh's parts have it (its other needs are in both).
[ ${#want[@]} -gt 0 ] || want=(mooncake-transfer-engine-cuda13==0.3.13.post1 vllm-router==0.1.17
  orjson==3.13.0)
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_39_x86_64 --platform manylinux_2_28_x86_64 \
  --platform manylinux_2_17_x86_64 -d "$W/wheels" "${want[@]}"
rm -rf "$OUT" && mkdir -p "$OUT/pieces"
(cd "$W" && tar cf - wheels) | split -b 48m - "$OUT/pieces/wheels.tar."
(cd "$OUT/pieces" && cat wheels.tar.* | sha256sum | sed 's/-$/wheels.tar/' >WHEELS.SHA256SUM)
i=0
for p in "$OUT"/pieces/wheels.tar.*; do i=$((i + 1)); mkdir -p "$OUT/$i"; mv "$p" "$OUT/$i/"; done
mv "$OUT/pieces/WHEELS.SHA256SUM" "$OUT/$i/" && rmdir "$OUT/pieces"
ls -la "$OUT"/*
