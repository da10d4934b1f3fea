#!/usr/bin/env bash
# Set up, build and run every test (CPU tests always; GPU tests skip with a reason when no
# device is present; every shipped scenario is described and validated on the cpu backend).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
"$ROOT/scripts/setup.sh"
"$ROOT/scripts/build.sh" "$@"
BUILD_DIR=${BUILD_DIR:-$ROOT/build}
ctest --test-dir "$BUILD_DIR" --output-on-failure --timeout 900 -j "$(nproc)"
