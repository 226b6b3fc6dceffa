#!/bin/sh
# smlaunch-entrypoint: runs under tini (PID 1), then becomes the command (`train` by default).
#
# Why: the local Docker executor runs containers as the calling user's uid:gid, so files written to
# the mounted /opt/ml tree belong to that user and cleanup never fails. That uid usually has no
# /etc/passwd entry in the image, and ssh/sshd (MPI jobs) refuse users they cannot look up. The
# image makes /etc/passwd writable by group 0 and the executor adds group 0 to the container, so
# an entry can be added here. Nothing else happens: `exec` keeps the command as tini's only child,
# so SIGTERM from `docker stop` (or SageMaker's StopTrainingJob) reaches the runtime directly.
set -e
uid=$(id -u)
if [ "$uid" != 0 ] && ! getent passwd "$uid" >/dev/null 2>&1 && [ -w /etc/passwd ]; then
  echo "u${uid}:x:${uid}:$(id -g):smlaunch user:/home/smlaunch:/bin/bash" >> /etc/passwd
fi
if [ -z "${HOME:-}" ] || [ "$HOME" = / ]; then
  export HOME=/home/smlaunch
fi
exec "$@"
