"""ssh between containers for MPI jobs: per-job keys and configs, and each host's loopback address.

Containers share this machine's network, so host ``algo-<i>`` has its own loopback address
(:func:`host_address`) and each host's sshd its own port; the runtime's multi-node MPI roles
(:mod:`runtime.mpi_roles`) use what :func:`write_ssh_material` writes. Used by
:mod:`estimator.backends.local.executors.docker`.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

from estimator.errors import ConfigurationError
from estimator.spec import TrainingJobSpec
from runtime import contract

CONTAINER_SSH_DIR = "/etc/smlaunch-ssh"
CONTAINER_SSH_CLIENT_CONFIG = "/etc/ssh/ssh_config.d/smlaunch-job.conf"
SSH_DIR_NAME = "ssh"


def host_address(host: str, names: list[str]) -> str:
    """Host ``i`` (0-based) of the job resolves to ``127.0.0.<i+1>``: a loopback address of its own.

    Every container shares this machine's network, so all of 127.0.0.0/8 reaches every container
    over ``lo``; distinct addresses keep the hosts distinct for software that decides "local or
    remote" by address: OpenMPI's ``mpirun`` would otherwise take every host resolving to
    127.0.0.1 for itself and start all ranks in the master's container instead of over ssh.
    """
    return f"127.0.0.{names.index(host) + 1}"


def host_addresses(names: list[str]) -> dict[str, str]:
    return {name: host_address(name, names) for name in names}


def uses_mpi(spec: TrainingJobSpec) -> bool:
    """Whether the runtime will run ``mpirun`` across hosts (MPI or model parallel)."""
    text = (spec.HyperParameters or {}).get(contract.HP_MPI_ENABLED, "false")
    raw: object = text
    with contextlib.suppress(ValueError):
        raw = json.loads(text)
    return raw is True or str(raw).lower() == "true"


def write_ssh_material(
    directory: Path, ports: dict[str, int], keygen: Callable[[Path], None] | None = None
) -> None:
    """Per-job ssh keys and configs for MPI between containers on one machine (module docstring).

    Files are the caller's and 0600 (the containers run as the caller, and ssh refuses keys others
    can read): ``id_ed25519`` (+ ``.pub`` = ``authorized_keys``), ``ssh_host_ed25519_key``,
    ``sshd_config-<host>`` (listens on the host's address and port), ``ssh_config`` (every host ->
    its address and port, no host-key prompts).
    """
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    (keygen or _ssh_keygen)(directory)
    (directory / "authorized_keys").write_bytes((directory / "id_ed25519.pub").read_bytes())
    for host, port in sorted(ports.items()):
        (directory / f"sshd_config-{host}").write_text(
            "\n".join(
                [
                    f"Port {port}",
                    f"ListenAddress {host_address(host, sorted(ports))}",
                    f"HostKey {CONTAINER_SSH_DIR}/ssh_host_ed25519_key",
                    f"AuthorizedKeysFile {CONTAINER_SSH_DIR}/authorized_keys",
                    "PubkeyAuthentication yes",
                    "PasswordAuthentication no",
                    "KbdInteractiveAuthentication no",
                    "PermitRootLogin prohibit-password",
                    "UsePAM no",
                    "StrictModes no",  # the image's home is group-writable (arbitrary uids)
                    "PidFile none",
                    "LogLevel ERROR",
                    "",
                ]
            )
        )
    lines: list[str] = []
    for host, port in sorted(ports.items()):
        lines += [
            f"Host {host}",
            f"    HostName {host_address(host, sorted(ports))}",
            f"    Port {port}",
            f"    IdentityFile {CONTAINER_SSH_DIR}/id_ed25519",
            "    StrictHostKeyChecking no",
            "    UserKnownHostsFile /dev/null",
            "    LogLevel ERROR",
        ]
    (directory / "ssh_config").write_text("\n".join(lines) + "\n")
    for path in directory.iterdir():
        path.chmod(0o600)


def _ssh_keygen(directory: Path) -> None:
    keygen = shutil.which("ssh-keygen")
    if keygen is None:
        raise ConfigurationError(
            "distribution",
            "mpi",
            "MPI jobs in containers need ssh-keygen on this machine to make per-job keys",
            "install openssh-client (apt-get install openssh-client)",
        )
    for name, comment in (("id_ed25519", "smlaunch-job"), ("ssh_host_ed25519_key", "smlaunch-host")):
        subprocess.run(
            [keygen, "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", str(directory / name)],
            check=True,
            capture_output=True,
            timeout=30,
        )
