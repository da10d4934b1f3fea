# Sourced by scripts/gpu-ab, scripts/gpu-ab-micro, scripts/gpu-ncu and scripts/gpu-trace (not run): binaries built elsewhere for sm_90a
# by scripts/prebuilt-bench and carried to the GPU machine, so that a device call builds nothing.

# prebuilt_unpack FILE DIR NAME: FILE as an executable DIR/NAME (decompressed if FILE.xz or
# FILE.gz); prints its path.
prebuilt_unpack() {
  local dst=$2/$3
  [[ -f $1 ]] || { echo "prebuilt: $1: no such file (build it here with scripts/prebuilt-bench and carry it)" >&2; return 2; }
  mkdir -p "$2"
  case $1 in
    *.xz) xz -dc "$1" >"$dst" 2>/dev/null ||
            python3 -c 'import lzma, shutil, sys; shutil.copyfileobj(lzma.open(sys.argv[1]), open(sys.argv[2], "wb"))' "$1" "$dst" ;;
    *.gz) gzip -dc "$1" >"$dst" ;;
    *) cp "$1" "$dst" ;;
  esac || { echo "prebuilt: cannot unpack $1" >&2; return 2; }
  chmod +x "$dst"
  echo "$dst"
}
