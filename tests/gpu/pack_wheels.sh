#!/usr/bin/env bash
# Pack what the GPU machine's image lacks beyond pack.sh's vLLM (Mooncake's transfer engine,
# vllm-router, orjson) into pieces the device tool can carry beside the working tree (at most 48
# MiB each), for h200.sh `stash` and `wheels`. Run where PyPI is reachable:
#   bash tests/gpu/pack_wheels.sh [OUT] [REQUIREMENT ...]
# The wheels are unpacked (a wheel is a zip: unpacking is what pip's install does, less the
# console scripts, which h200.sh `setup` writes), Mooncake's parts that vLLM's MooncakeConnector
# and pdctl's transfer preflight never load are dropped (both import mooncake.engine alone), and
# the folder goes as one xz tar: ~40 MiB, one call, where the three wheels are 118 MiB, three.
# Writes OUT/1/wheels.tar.xz.aa, ... and WHEELS.SHA256SUM in the last folder: carry one folder
# per call, then `h200.sh wheels` joins, checks and unpacks them into the site folder `setup`
# put on the venv's path.
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
mkdir -p "$W/site"
for w in "$W"/wheels/*.whl; do
  unzip -q -o "$w" -d "$W/site"
  if ls -d "$W"/site/*.data >/dev/null 2>&1; then echo "$w has a .data folder: install it with pip" >&2; exit 1; fi
done
# Mooncake 0.3.13.post1's process-group and expert-parallel backends (torch.distributed, DeepEP),
# its benchmark and its store client: 240 MiB that mooncake.engine does not load (engine.so needs
# libasio.so and libetcd_wrapper.so, kept with the rest).
m=$W/site/mooncake
rm -f "$m"/libmooncake_pg.so "$m"/libmooncake_pg_device.so "$m"/pg_2_*.so "$m"/_ep.*.so \
  "$m"/libmooncake_ep_device.so "$m"/transfer_engine_bench "$m"/mooncake_client
rm -rf "$OUT" && mkdir -p "$OUT/pieces"
tar cf - -C "$W/site" . | xz -T2 -9 | split -b 48m - "$OUT/pieces/wheels.tar.xz."
(cd "$OUT/pieces" && cat wheels.tar.xz.* | sha256sum | sed 's/-$/wheels.tar.xz/' >WHEELS.SHA256SUM)
i=0
for p in "$OUT"/pieces/wheels.tar.xz.*; do i=$((i + 1)); mkdir -p "$OUT/$i"; mv "$p" "$OUT/$i/"; done
mv "$OUT/pieces/WHEELS.SHA256SUM" "$OUT/$i/" && rmdir "$OUT/pieces"
ls -la "$OUT"/*
