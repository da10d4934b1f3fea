#!/usr/bin/env bash
# Set up, build and run the main job: the quickstart scenario on every backend this machine
# can run (`all`: the cpu backend everywhere, the CUDA backends where a GPU is present).
# With no GPU to run them on, the CUDA kernels are not built for it (about 12 minutes on two
# cores): the cpu backend alone is built into build-cpu/, which leaves build/ to scripts/test.sh.
# ATTN_QUICKSTART_CUDA=1 builds the CUDA backends anyway (they then report "skipped: no GPU").
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
"$ROOT/scripts/setup.sh"
FLAGS=()
if [[ ${ATTN_QUICKSTART_CUDA:-0} != 1 ]] && ! nvidia-smi -L 2>/dev/null | grep -q '^GPU'; then
  export BUILD_DIR=${BUILD_DIR:-$ROOT/build-cpu}
  FLAGS=(-DATTN_CUDA=OFF -DATTN_BUILD_TESTS=OFF -DATTN_BUILD_MICRO=OFF)
  echo "run-quickstart: no GPU here; building the cpu backend only, into $BUILD_DIR" \
    "(ATTN_QUICKSTART_CUDA=1 builds the CUDA backends too)" >&2
fi
"$ROOT/scripts/build.sh" "${FLAGS[@]}"
BUILD_DIR=${BUILD_DIR:-$ROOT/build}
mkdir -p "$ROOT/out"
exec "$BUILD_DIR/apps/attn-bench" run "$ROOT/scenarios/quickstart.toml" --backend all \
  --output "$ROOT/out/quickstart.csv" --output "$ROOT/out/quickstart.json" "$@"
