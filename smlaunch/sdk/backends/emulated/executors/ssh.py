"""ssh between the hosts of an MPI job, for the executors whose hosts are containers or pods.

The runtime's multi-node MPI roles (:mod:`smlaunch.runtime.launchers.mpi.roles`: workers serve sshd,
the master runs ``mpirun`` over ssh) need every worker to accept the master's key. The Docker
executor (:mod:`smlaunch.sdk.backends.emulated.executors.docker.executor`) and the Kubernetes
executor (:mod:`smlaunch.sdk.backends.kubernetes.executor`) both give each job fresh keys and one
``sshd_config`` per host with :func:`write_ssh_material`, and tell the runtime through
``SMLAUNCH_SSHD_CONFIG``, ``SMLAUNCH_SSH_PORTS`` (and ``SMLAUNCH_SSH_CONFIG``) :func:`ssh_environment`.
Hosts that share one network (Docker's host network, host-network pods) each get their own loopback
address (:func:`host_address`) and sshd port; hosts with a network of their own (pods) listen on
every address and are reached by name. The keys never leave the files written here: nothing of
them is logged or put in an environment.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Callable, Mapping
from pathlib import Path

from smlaunch import contract
from smlaunch.contract import hyperparameters as hp
from smlaunch.sdk.errors import ConfigurationError
from smlaunch.sdk.request.spec import TrainingJobSpec

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
    """Whether the runtime will run ``mpirun`` across hosts: the MPI flag set, and no smp model
    parallelism (whose launcher starts each host's ranks itself, with no ssh between hosts).

    Read from the wire with the runtime's own reading of the flags (:mod:`smlaunch.contract.hyperparameters`,
    :func:`smlaunch.runtime.launchers.host_strategy`), since the host decides from exactly that.
    """
    params = hp.decode(spec.HyperParameters or {})
    if not hp.truthy(params.get(contract.HP_MPI_ENABLED, False)):
        return False
    return contract.HP_MP_PARAMETERS not in params or hp.env_value(params[contract.HP_MP_PARAMETERS]) in (
        "",
        "{}",
    )


def write_ssh_material(
    directory: Path,
    ports: Mapping[str, int],
    keygen: Callable[[Path], None] | None = None,
    *,
    host_dir: str = CONTAINER_SSH_DIR,
    addresses: Mapping[str, str] | None = None,
) -> None:
    """Fresh per-job ssh keys and configs in ``directory`` (emptied first: a new attempt gets new keys).

    ``host_dir`` is where the hosts see ``directory``; ``addresses`` maps each host to the address its
    sshd listens on and the master dials (hosts sharing one network), None: sshd listens on every
    address and hosts are dialled by name. Files are the caller's and 0600 (ssh refuses keys others
    can read): ``id_ed25519`` (+ ``.pub`` = ``authorized_keys``), ``ssh_host_ed25519_key``,
    ``sshd_config-<host>`` (the host's port, and address), ``ssh_config`` (every host -> its port
    and address, the job's key, no host-key prompts).
    """
    if directory.exists():
        shutil.rmtree(directory)
    directory.mkdir(mode=0o700, parents=True)
    (keygen or _ssh_keygen)(directory)
    (directory / "authorized_keys").write_bytes((directory / "id_ed25519.pub").read_bytes())
    for host, port in sorted(ports.items()):
        listen = [] if addresses is None else [f"ListenAddress {addresses[host]}"]
        (directory / f"sshd_config-{host}").write_text(
            "\n".join(
                [
                    f"Port {port}",
                    *listen,
                    f"HostKey {host_dir}/ssh_host_ed25519_key",
                    f"AuthorizedKeysFile {host_dir}/authorized_keys",
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
            f"    HostName {host if addresses is None else addresses[host]}",
            f"    Port {port}",
            f"    IdentityFile {host_dir}/id_ed25519",
            "    IdentitiesOnly yes",
            "    StrictHostKeyChecking no",
            "    UserKnownHostsFile /dev/null",
            "    LogLevel ERROR",
        ]
    (directory / "ssh_config").write_text("\n".join(lines) + "\n")
    for path in directory.iterdir():
        path.chmod(0o600)


def ssh_environment(
    host: str, ports: Mapping[str, int], host_dir: str, client_config: bool
) -> dict[str, str]:
    """The runtime's variables for ``host`` of a job whose material is at ``host_dir``: its sshd's
    config and every host's port; with ``client_config``, the ssh client config for the master's
    ``ssh -F`` (where it cannot be put in ``/etc/ssh/ssh_config.d``)."""
    env = {
        contract.SMLAUNCH_SSHD_CONFIG: f"{host_dir}/sshd_config-{host}",
        contract.SMLAUNCH_SSH_PORTS: json.dumps(dict(ports), sort_keys=True),
    }
    if client_config:
        env[contract.SMLAUNCH_SSH_CONFIG] = f"{host_dir}/ssh_config"
    return env


def _ssh_keygen(directory: Path) -> None:
    keygen = shutil.which("ssh-keygen")
    if keygen is None:
        raise ConfigurationError(
            "distribution",
            "mpi",
            "MPI jobs in containers or pods need ssh-keygen where the job's agent runs, to make per-job keys",
            "install openssh-client (apt-get install openssh-client)",
        )
    for name, comment in (("id_ed25519", "smlaunch-job"), ("ssh_host_ed25519_key", "smlaunch-host")):
        subprocess.run(
            [keygen, "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", str(directory / name)],
            check=True,
            capture_output=True,
            timeout=30,
        )
