#!/bin/sh
# Shared by Dockerfile.cpu and Dockerfile.cuda: the OS-level setup every smlaunch image needs,
# whatever its base (our Debian base, NVIDIA's CUDA images, AWS Deep Learning Containers).
#   - tini (PID 1), OpenMPI and openssh are installed with apt only when missing, so a base that
#     already has them (our base image, most DLCs) needs no network here;
#   - a non-root default user `smlaunch` (uid $SMLAUNCH_UID) with a home directory writable by
#     group 0, and /etc/passwd writable by group 0 (see entrypoint.sh: arbitrary uids get an entry);
#   - /opt/ml exists and is writable by group 0 (SageMaker mounts over it; locally we bind-mount);
#   - ssh client defaults for MPI between hosts of one job (host keys change every job).
set -eu
uid="${SMLAUNCH_UID:-1000}"

missing=""
command -v tini >/dev/null 2>&1 || missing="$missing tini"
command -v sshd >/dev/null 2>&1 || [ -x /usr/sbin/sshd ] || missing="$missing openssh-server"
command -v ssh >/dev/null 2>&1 || missing="$missing openssh-client"
command -v mpirun >/dev/null 2>&1 || missing="$missing openmpi-bin"
if [ -n "$missing" ]; then
  export DEBIAN_FRONTEND=noninteractive
  apt-get update
  # shellcheck disable=SC2086
  apt-get install -y --no-install-recommends $missing
  rm -rf /var/lib/apt/lists/*
fi

if ! getent passwd smlaunch >/dev/null 2>&1; then
  useradd --create-home --home-dir /home/smlaunch --uid "$uid" --gid 0 --shell /bin/bash smlaunch
fi
chgrp 0 /etc/passwd /etc/group
chmod g+w /etc/passwd /etc/group
mkdir -p /home/smlaunch/.ssh /opt/ml /run/sshd
chown -R smlaunch:0 /home/smlaunch /opt/ml
chmod -R g+rwX /home/smlaunch /opt/ml

mkdir -p /etc/ssh/ssh_config.d
cat > /etc/ssh/ssh_config.d/smlaunch.conf <<'CONF'
# Hosts of one training job trust each other; their keys are generated per job.
Host algo-*
    StrictHostKeyChecking no
    UserKnownHostsFile /dev/null
    LogLevel ERROR
CONF

install -m 0755 /tmp/smlaunch-image/entrypoint.sh /usr/local/bin/smlaunch-entrypoint
