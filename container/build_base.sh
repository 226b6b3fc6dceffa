#!/usr/bin/env bash
# Build (or reuse) a Debian base image from a root filesystem, without any image registry.
#
# Why: machines without registry access (CI, air-gapped labs) cannot `docker pull debian`, but they
# can usually reach a Debian package mirror. debootstrap builds the root filesystem from Debian's
# packages; `docker import` turns it into an image. The result is cached, keyed by a hash of the
# recipe (suite, mirror, package list, this script's version), at two levels:
#   1. the image tag smlaunch-base:<suite>-<hash> in the engine (reused if present);
#   2. a rootfs tarball in $SMLAUNCH_CACHE_DIR (default ~/.cache/smlaunch), re-imported into a fresh
#      engine without running debootstrap again (a CI cache only has to keep that directory).
#
# Usage: container/build_base.sh            prints the image tag on the last line of stdout
# Environment:
#   SMLAUNCH_DEBIAN_SUITE    default bookworm (its python3 is 3.11, matching the cp311 torch wheel)
#   SMLAUNCH_DEBIAN_MIRROR   default: the first deb.debian.org-style URI in apt's sources, else
#                            http://deb.debian.org/debian
#   SMLAUNCH_CACHE_DIR       default ${XDG_CACHE_HOME:-$HOME/.cache}/smlaunch
# Needs: root (debootstrap), debootstrap, docker CLI and a running engine.
set -euo pipefail

RECIPE_VERSION=2
SUITE="${SMLAUNCH_DEBIAN_SUITE:-bookworm}"
CACHE_DIR="${SMLAUNCH_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/smlaunch}"
# What every smlaunch image needs from the OS: Python for the runtime, OpenMPI + sshd for MPI jobs
# across hosts, tini as PID 1 (forwards SIGTERM), procps for debugging, CA certificates for S3.
PACKAGES="python3,python3-pip,python3-venv,openmpi-bin,openssh-server,openssh-client,tini,procps,ca-certificates,netbase"

mirror_from_apt() {
  # deb822 (.sources) "URIs:" lines or one-line "deb URI suite" entries; the first Debian one wins.
  local uri
  uri=$( (cat /etc/apt/sources.list.d/*.sources 2>/dev/null | awk '/^URIs:/ {print $2}';
          cat /etc/apt/sources.list /etc/apt/sources.list.d/*.list 2>/dev/null | awk '/^deb / {print $2}') \
        | grep -E '/debian/?$' | head -n1 || true)
  echo "${uri:-http://deb.debian.org/debian}"
}
MIRROR="${SMLAUNCH_DEBIAN_MIRROR:-$(mirror_from_apt)}"

RECIPE="v${RECIPE_VERSION} suite=${SUITE} variant=minbase mirror=${MIRROR} packages=${PACKAGES}"
HASH=$(printf '%s' "$RECIPE" | sha256sum | cut -c1-12)
TAG="smlaunch-base:${SUITE}-${HASH}"
TARBALL="${CACHE_DIR}/base-${SUITE}-${HASH}.tar"

log() { echo "build_base: $*" >&2; }

if ! docker info >/dev/null 2>&1; then
  log "no Docker engine answers; start one, e.g.:"
  log "  dockerd --storage-driver=vfs --iptables=false --bridge=none >/tmp/dockerd.log 2>&1 &"
  exit 2
fi

if docker image inspect "$TAG" >/dev/null 2>&1; then
  log "reusing image $TAG"
  echo "$TAG"
  exit 0
fi

mkdir -p "$CACHE_DIR"
if [ ! -s "$TARBALL" ]; then
  command -v debootstrap >/dev/null || { log "debootstrap is not installed (apt-get install debootstrap)"; exit 2; }
  [ "$(id -u)" = 0 ] || { log "debootstrap needs root"; exit 2; }
  ROOTFS=$(mktemp -d "${CACHE_DIR}/rootfs.XXXXXX")
  trap 'rm -rf "$ROOTFS" "${TARBALL}.partial"' EXIT
  log "debootstrap $SUITE from $MIRROR (recipe $HASH); this takes a few minutes"
  # Exit 2 (a prerequisite is missing) when the mirror cannot deliver: the caller can tell an
  # unreachable package mirror from a broken recipe only by the log above this line.
  debootstrap --variant=minbase --include="$PACKAGES" "$SUITE" "$ROOTFS" "$MIRROR" >&2 \
    || { log "debootstrap from $MIRROR failed (is the mirror reachable? see the log above)"; exit 2; }
  # Keep the image small and free of host-specific state.
  chroot "$ROOTFS" apt-get clean
  rm -rf "$ROOTFS"/var/lib/apt/lists/* "$ROOTFS"/var/cache/apt/*.bin "$ROOTFS"/var/log/*.log \
         "$ROOTFS"/etc/ssh/ssh_host_* "$ROOTFS"/tmp/* "$ROOTFS"/root/.cache
  chmod 0755 "$ROOTFS"  # mktemp made it 0700: the image's / must be traversable by non-root users
  tar --numeric-owner -C "$ROOTFS" -cf "${TARBALL}.partial" .
  mv "${TARBALL}.partial" "$TARBALL"
  rm -rf "$ROOTFS"
  trap - EXIT
fi

log "importing $TARBALL as $TAG"
docker import \
  --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
  --change 'ENV LANG=C.UTF-8' \
  --change 'CMD ["/bin/bash"]' \
  --message "smlaunch base: $RECIPE" \
  "$TARBALL" "$TAG" >&2
echo "$TAG"
