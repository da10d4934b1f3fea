#!/usr/bin/env bash
# Set up, build and run the main job: the quickstart scenario on every backend this machine
# can run (`all`: the cpu backend everywhere, the CUDA backends where a GPU is present).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
"$ROOT/scripts/setup.sh"
"$ROOT/scripts/build.sh"
BUILD_DIR=${BUILD_DIR:-$ROOT/build}
mkdir -p "$ROOT/out"
exec "$BUILD_DIR/apps/attn-bench" run "$ROOT/scenarios/quickstart.toml" --backend all \
  --output "$ROOT/out/quickstart.csv" --output "$ROOT/out/quickstart.json" "$@"
