#!/usr/bin/env bash
# Build an smlaunch training image: prepare a small build context, then `docker build`.
#
#   container/build.sh cpu  [--base IMAGE] [--tag TAG] [--torch-version V] [--extra "pkg ..."]
#   container/build.sh cuda [--base IMAGE] [--tag TAG] [--torch-version V] [--nccl-version V|none]
#                           [--torch-index URL | --wheels-here]
#
# cuda without an NVIDIA base (no registry reachable): `--base <our debootstrapped base>
# --nccl-version none --wheels-here` downloads torch's CUDA build (PyPI's Linux torch wheel) and its
# nvidia-* wheels (nccl, cuda-runtime, cudnn, ...) on THIS machine, as for cpu, so the image gets
# NCCL and the CUDA libraries from them and its build needs no package index.
#
# The context holds only what the image needs: entrypoint.sh, setup_image.sh, wheels/app (a wheel
# of this checkout's smlaunch) and wheels/deps (requirements.txt: torch, numpy, smlaunch's
# dependencies and --extra packages; for cpu also their wheels, downloaded on THIS machine with its
# pip configuration, so the build itself needs no network and no pip config inside the image).
#
# cpu without --base first builds (or reuses) the debootstrapped Debian base (build_base.sh).
# The tag defaults to smlaunch-<kind>:<hash>, the hash covering the base image id, the container
# files, smlaunch's sources and the package list; an image with that tag is reused, not rebuilt.
# The image tag is printed as the last line of stdout; progress goes to stderr.
set -euo pipefail

HERE="$(cd "$(dirname "$0")" && pwd)"
REPO="$(cd "$HERE/.." && pwd)"
KIND="${1:-}"; shift || true
case "$KIND" in cpu|cuda) ;; *) echo "usage: $0 cpu|cuda [--base IMAGE] [--tag TAG] [--torch-version V] [--extra PKGS] [--nccl-version V|none] [--torch-index URL | --wheels-here]" >&2; exit 2;; esac

BASE=""; TAG=""; TORCH_VERSION="${SMLAUNCH_TORCH_VERSION:-2.13.0}"; EXTRA=""; NCCL_VERSION=""; TORCH_INDEX=""
WHEELS_HERE=0; [ "$KIND" = cpu ] && WHEELS_HERE=1
while [ $# -gt 0 ]; do
  case "$1" in
    --base) BASE="$2"; shift 2;;
    --tag) TAG="$2"; shift 2;;
    --torch-version) TORCH_VERSION="$2"; shift 2;;
    --extra) EXTRA="$2"; shift 2;;
    --nccl-version) NCCL_VERSION="$2"; shift 2;;
    --torch-index) TORCH_INDEX="$2"; shift 2;;
    --wheels-here) WHEELS_HERE=1; shift;;
    *) echo "build.sh: unknown argument $1" >&2; exit 2;;
  esac
done
log() { echo "build.sh: $*" >&2; }
PYTHON="${PYTHON:-python3}"

if [ -z "$BASE" ]; then
  if [ "$KIND" = cpu ]; then BASE="$("$HERE/build_base.sh" | tail -n1)"; else BASE="nvidia/cuda:12.4.1-cudnn-runtime-ubuntu22.04"; fi
fi
BASE_ID="$(docker image inspect --format '{{.Id}}' "$BASE" 2>/dev/null || echo "$BASE")"

# Packages for wheels/deps/requirements.txt: torch (empty version keeps the base's), numpy, and
# smlaunch's runtime dependencies as pyproject.toml declares them.
REQUIREMENTS="$("$PYTHON" - "$REPO/pyproject.toml" "$TORCH_VERSION" "$EXTRA" <<'PY'
import sys, tomllib
project = tomllib.load(open(sys.argv[1], "rb"))["project"]
lines = ([f"torch=={sys.argv[2]}"] if sys.argv[2] else []) + ["numpy"]
lines += project.get("dependencies", []) + sys.argv[3].split()
print("\n".join(lines))
PY
)"

# Content hash of everything that goes into the image.
HASH="$( {
  echo "$KIND $BASE_ID $NCCL_VERSION $TORCH_INDEX $WHEELS_HERE"; echo "$REQUIREMENTS"
  cat "$HERE/Dockerfile.$KIND" "$HERE/entrypoint.sh" "$HERE/setup_image.sh" "$REPO/pyproject.toml"
  (cd "$REPO" && find smlaunch estimator -type f -name '*.py' -not -name '.*' | LC_ALL=C sort | xargs sha256sum)
} | sha256sum | cut -c1-12)"
TAG="${TAG:-smlaunch-$KIND:$HASH}"
if [ "${SMLAUNCH_REBUILD:-0}" != 1 ] && [ "$TAG" = "smlaunch-$KIND:$HASH" ] \
   && docker image inspect "$TAG" >/dev/null 2>&1; then
  log "reusing image $TAG"
  echo "$TAG"; exit 0
fi

CTX="$(mktemp -d "${TMPDIR:-/tmp}/smlaunch-image.XXXXXX")"
trap 'rm -rf "$CTX"' EXIT
mkdir -p "$CTX/wheels/deps" "$CTX/wheels/app" "$CTX/src"
cp "$HERE/entrypoint.sh" "$HERE/setup_image.sh" "$CTX/"
echo "$REQUIREMENTS" > "$CTX/wheels/deps/requirements.txt"

# A wheel of this checkout, built from a copy so the checkout gets no build/ or egg-info litter.
cp -r "$REPO/pyproject.toml" "$REPO/smlaunch" "$REPO/estimator" "$CTX/src/"
[ -f "$REPO/README.md" ] && cp "$REPO/README.md" "$CTX/src/" || echo "# smlaunch" > "$CTX/src/README.md"
find "$CTX/src" -name '__pycache__' -prune -exec rm -rf {} + -o -name '.*.tmp' -exec rm -f {} +
log "building the smlaunch wheel"
# Without build isolation when this Python has setuptools (no index needed), else with it.
"$PYTHON" -m pip wheel -q --no-deps --no-build-isolation -w "$CTX/wheels/app" "$CTX/src" >&2 2>/dev/null \
  || "$PYTHON" -m pip wheel -q --no-deps -w "$CTX/wheels/app" "$CTX/src" >&2
rm -rf "$CTX/src"

if [ "$WHEELS_HERE" = 1 ]; then
  log "downloading wheels: $(echo "$REQUIREMENTS" | tr '\n' ' ')"
  "$PYTHON" -m pip download -q --only-binary=:all: -d "$CTX/wheels/deps" -r "$CTX/wheels/deps/requirements.txt" >&2 \
    || { log "downloading the wheels failed (is the package index reachable? see above)"; exit 2; }
fi

log "docker build $TAG (base $BASE)"
ARGS=(--build-arg "BASE_IMAGE=$BASE")
# "none": install no libnccl2 from apt (the base or torch's nvidia-nccl wheel provides NCCL).
[ "$NCCL_VERSION" = none ] && ARGS+=(--build-arg "NCCL_VERSION=")
[ -n "$NCCL_VERSION" ] && [ "$NCCL_VERSION" != none ] && ARGS+=(--build-arg "NCCL_VERSION=$NCCL_VERSION")
[ -n "$TORCH_INDEX" ] && ARGS+=(--build-arg "TORCH_INDEX_URL=$TORCH_INDEX")
[ "$KIND" = cuda ] && [ "$WHEELS_HERE" = 1 ] && ARGS+=(--build-arg "PIP_NO_INDEX=1")
# Host networking for the build: a cuda build (or a base missing packages) reaches the same
# package mirrors as this machine; the cpu build on our base needs no network at all.
DOCKER_BUILDKIT=0 docker build --network host -f "$HERE/Dockerfile.$KIND" "${ARGS[@]}" -t "$TAG" "$CTX" >&2
echo "$TAG"
