"""The Docker executor of the local backend: one container per emulated host, as SageMaker's local mode.

Chosen explicitly (``LocalSession(executor="docker")`` or ``SMLAUNCH_EXECUTOR=docker``); processes
stay the default. Everything but *how a host starts* is the local backend's: the job directory and
its files (:mod:`smlaunch.sdk.backends.emulated.state`), the per-host ``/opt/ml`` trees and channel views
(:mod:`smlaunch.sdk.backends.emulated.layout`, :mod:`smlaunch.sdk.backends.emulated.data`), the agent's log
streaming, failure / stop / ``max_run`` policy and artifact packaging
(:mod:`smlaunch.sdk.backends.emulated.agent`). :class:`DockerExecutor` only replaces the host processes by
containers, which it makes look like the ``subprocess.Popen`` objects the agent supervises
(:class:`~smlaunch.sdk.backends.emulated.executors.docker.containers.ContainerProcess`).

Each host ``algo-N`` of job ``<job>`` runs as the container ``<job>-algo-N``:

- image: the spec's ``TrainingImage`` (``image_uri``), else ``$SMLAUNCH_DOCKER_IMAGE``; it must be
  present in the local engine (smlaunch never pulls) and provide ``train`` (SageMaker's contract:
  ``docker run IMAGE train``); ``container/build.sh cpu`` builds one. A request with a
  ``ContainerEntrypoint`` (a ModelTrainer job's ``sm_train.sh``) in an image without smlaunch's
  runtime runs that entry point instead, as SageMaker does, so any image with bash and Python runs
  it (:mod:`.images`; the drivers channel is copied into each host's tree: ``sm_train.sh``
  runs ``chmod +x`` on itself);
- hostname ``algo-N``, host networking, ``algo-i`` resolving to its own loopback address
  ``127.0.0.<i>`` (``extra_hosts``; see :func:`host_address`), so ranks meet over loopback on the free
  ports the agent picks (nothing is published, no bridge); ``network_interface_name`` is ``lo``;
- its own host tree bind-mounted at ``/opt/ml``; the job's ``file://`` code and channel originals
  (the channel views are symlinks to them) and the ``s3://`` download cache read-only at the same
  absolute paths; the tree's TensorBoard directory also at a TensorBoard ``LocalPath`` outside
  ``/opt/ml``. Every mount source exists before the container starts (the engine would create a
  missing one as root);
- the calling user's ``uid:gid`` (plus group 0, which the image uses for its writable paths), so
  every file in the mounted trees belongs to the caller and cleanup never fails;
- all GPUs (a device request) when the instance type has GPUs and this machine has some;
- an environment of the host's own variables, smlaunch's ``SMLAUNCH_*`` knobs and the caller's
  non-secret AWS configuration, never a credential: AWS credentials reach the container through a
  per-job credentials endpoint the agent serves on loopback
  (:mod:`smlaunch.sdk.backends.emulated.executors.docker.credentials`);
- labels ``smlaunch.job=<job>`` and ``smlaunch.host=algo-N``: every exit path removes the job's
  containers by label; if the agent itself is killed, a small reaper process (started by
  :meth:`DockerExecutor.submitted`) removes them.

MPI jobs use the runtime's real multi-node roles (:mod:`smlaunch.runtime.launchers.mpi.roles`): workers serve
sshd, the master runs ``mpirun`` over ssh (:mod:`smlaunch.sdk.backends.emulated.executors.ssh`, shared
with the Kubernetes executor). Containers share the host's network, so each host's sshd listens
on its own loopback port: the agent writes per-job keys, one ``sshd_config`` per host and an
``ssh_config`` mapping ``algo-N`` to its port, mounts them read-only at ``/etc/smlaunch-ssh`` and
``/etc/ssh/ssh_config.d/``, and tells the runtime through ``SMLAUNCH_SSHD_CONFIG`` and
``SMLAUNCH_SSH_PORTS``.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any, ClassVar

from smlaunch import contract
from smlaunch.contract.processes import environment_importing_smlaunch, free_port
from smlaunch.sdk.backends.emulated import layout
from smlaunch.sdk.backends.emulated.executors.base import Executor, LaunchContext
from smlaunch.sdk.backends.emulated.executors.docker.containers import (
    LABEL_HOST,
    LABEL_JOB,
    NO_ENGINE_FIX,
    ContainerProcess,
    FailedStart,
    api_message,
    docker_client,
    docker_errors,
    reap,
    sweep,
)
from smlaunch.sdk.backends.emulated.executors.docker.credentials import (
    CredentialServer,
    container_aws_configuration,
)
from smlaunch.sdk.backends.emulated.executors.docker.images import (
    has_runtime,
    own_drivers_copy,
    require_train,
)
from smlaunch.sdk.backends.emulated.executors.ssh import (
    CONTAINER_SSH_CLIENT_CONFIG,
    CONTAINER_SSH_DIR,
    SSH_DIR_NAME,
    host_address,
    host_addresses,
    ssh_environment,
    uses_mpi,
    write_ssh_material,
)
from smlaunch.sdk.backends.emulated.job_settings import DockerSettings
from smlaunch.sdk.backends.emulated.state import JobDir
from smlaunch.sdk.errors import ConfigurationError
from smlaunch.sdk.request.spec import TrainingJobSpec

DOCKER_IMAGE_ENV = "SMLAUNCH_DOCKER_IMAGE"
CONTAINER_BASE_DIR = "/opt/ml"


# Variables of the caller's environment a container inherits besides its non-secret AWS
# configuration (smlaunch.sdk.backends.emulated.executors.docker.credentials): smlaunch's knobs such as fault
# injection.
# Everything else of this machine, credentials included, stays out of the container's definition.
INHERITED_PREFIXES = ("SMLAUNCH_",)


class DockerExecutor(Executor):
    """One container per host (module docstring); the agent's policy applies unchanged.

    ``client`` (a Docker SDK ``DockerClient``, or a fake in tests) is made from the environment on
    first use when not given; ``stream_client`` serves log streams and waits, which block for as
    long as a container runs (no request timeout), and defaults to ``client`` when one is given.
    """

    name: ClassVar[str] = "docker"
    hosts_called: ClassVar[str] = "containers"
    layered_requirements: ClassVar[bool] = False
    mounts_container_paths: ClassVar[bool] = True

    def __init__(
        self, client: Any | None = None, stream_client: Any | None = None, image: str | None = None
    ) -> None:
        self._client = client
        self._image = image
        """The image of jobs without ``image_uri`` (the session's ``docker_image`` setting)."""
        self._stream_client = stream_client
        self.containers: dict[str, Any] = {}
        """The containers of the running attempt, by host name."""
        self.credentials = CredentialServer()
        """The per-job AWS credentials endpoint (started on the first launch)."""
        self._credentials_env: dict[str, str] | None = None

    # --- in the notebook ------------------------------------------------------------------------

    def client(self) -> Any:
        """The injected Docker client, else one from the environment (created on first use); raises
        ConfigurationError when no engine answers."""
        if self._client is None:
            self._client = docker_client()
        else:
            try:
                self._client.ping()
            except Exception as exc:
                raise ConfigurationError(
                    "executor",
                    "docker",
                    f"the Docker engine does not answer ({type(exc).__name__}: {exc})",
                    NO_ENGINE_FIX,
                ) from None
        return self._client

    def image(self, spec: TrainingJobSpec) -> str:
        """The spec's ``TrainingImage``, else the session's ``docker_image`` setting (else
        ``$SMLAUNCH_DOCKER_IMAGE``, for an executor made without a session); ConfigurationError if none."""
        image = spec.AlgorithmSpecification.TrainingImage or self._image or os.environ.get(DOCKER_IMAGE_ENV)
        if not image:
            raise ConfigurationError(
                "image_uri",
                None,
                "the docker executor needs an image and none was given",
                "build one with `container/build.sh cpu` and pass image_uri=<its tag> "
                f"(or set the docker_image setting: LocalSession(docker_image=...), {DOCKER_IMAGE_ENV}, "
                "or docker_image in ~/.config/smlaunch/config.yaml)",
            )
        return image

    def check(self, spec: TrainingJobSpec) -> None:
        """An engine answers, the image is present locally and has ``train``. The code is staged
        after this check, so a mount source that vanishes later (code or data) fails the job at
        launch with a ClientError naming it, before any container starts and before the engine
        could create the missing source as root (:meth:`_start`)."""
        client = self.client()
        image = self.image(spec)
        errors = docker_errors()
        try:
            found = client.images.get(image)
        except errors.ImageNotFound:
            raise ConfigurationError(
                "image_uri",
                image,
                "is not present in the local Docker engine (smlaunch never pulls images)",
                "build it (container/build.sh cpu --tag <name>), or `docker pull` / `docker load` it first",
            ) from None
        if spec.AlgorithmSpecification.ContainerEntrypoint and not has_runtime(client, image, found):
            return  # SageMaker's way: the request's entry point (a ModelTrainer job's sm_train.sh)
        require_train(client, image, found)

    def settings(self, spec: TrainingJobSpec) -> DockerSettings:
        """The image, the caller's uid/gid (whether the containers get GPUs is
        ``JobSettings.gpu_devices``), and the request's entry point where the image has no smlaunch
        runtime to run instead (module docstring)."""
        image = self.image(spec)
        algorithm = spec.AlgorithmSpecification
        entrypoint = arguments = None
        if algorithm.ContainerEntrypoint:
            client = self.client()
            if not has_runtime(client, image, client.images.get(image)):
                entrypoint = list(algorithm.ContainerEntrypoint)
                arguments = list(algorithm.ContainerArguments or [])
        return DockerSettings(
            image=image, uid=os.getuid(), gid=os.getgid(), entrypoint=entrypoint, arguments=arguments
        )

    def submitted(self, job: JobDir) -> None:
        """A reaper that removes the job's containers should the agent die without doing it (e.g.
        SIGKILL): ``python -m smlaunch.sdk.backends.emulated.executors.docker.executor --reap <job dir>``."""
        with job.open_log(job.logs_dir / "reaper.log") as log:
            subprocess.Popen(
                [sys.executable, "-m", __name__, "--reap", str(job.path)],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                close_fds=True,
                env=environment_importing_smlaunch(),
            )

    # --- in the agent -----------------------------------------------------------------------------

    def agent_client(self) -> Any:
        """The client for API requests in the agent (bounded by a timeout)."""
        if self._client is None:
            self._client = docker_client()
        return self._client

    def stream_client(self) -> Any:
        """The client for log streams and waits (no request timeout)."""
        if self._stream_client is None:
            self._stream_client = self._client if self._client is not None else docker_client(timeout=None)
        return self._stream_client

    def prepare(self, context: LaunchContext) -> None:
        own = context.settings.executor_fields(DockerSettings)
        for host in context.hosts:
            if own.entrypoint:
                own_drivers_copy(host.paths.input_data_dir)
            # Containers share this machine's network: the hosts' traffic goes over loopback.
            config = json.loads(host.paths.resource_config_file.read_text())
            config["network_interface_name"] = "lo"
            host.paths.resource_config_file.write_text(json.dumps(config))
            # The paths inside the container, as the user gave them (or SageMaker's defaults).
            for config_file, local_path in (
                (host.paths.checkpoint_config_file, layout.checkpoint_local_path(context.spec)),
                (host.paths.tensorboard_config_file, layout.tensorboard_local_path(context.spec)),
            ):
                if local_path is not None:
                    config = json.loads(config_file.read_text())
                    config["LocalPath"] = local_path
                    config_file.write_text(json.dumps(config))

    def launch(self, context: LaunchContext) -> None:
        spec, settings, hosts = context.spec, context.settings, context.hosts
        port = free_port()
        names = [h.name for h in hosts]
        image = settings.executor_fields(DockerSettings).image
        mounts = self._mounts(context)
        env_common = self._inherited_env()
        if self._credentials_env is None:  # one endpoint for every attempt of the job
            self._credentials_env = self.credentials.start()
        env_common.update(self._credentials_env)
        ssh_ports: dict[str, int] = {}
        if uses_mpi(spec) and len(hosts) > 1:
            ssh_ports = {name: free_port() for name in names}
            write_ssh_material(context.job.path / SSH_DIR_NAME, ssh_ports, addresses=host_addresses(names))
        context.say(
            f"Job {spec.TrainingJobName}: {len(hosts)} container(s) {names} from image "
            f"{image}, emulating {spec.ResourceConfig.InstanceType}, "
            f"master {names[0]}={host_address(names[0], names)}:{port} "
            f"(host network, hosts {host_addresses(names)}), "
            f"stop grace {context.grace:g} s, max run {spec.StoppingCondition.MaxRuntimeInSeconds} s"
            + (f", sshd ports {ssh_ports}" if ssh_ports else "")
        )
        failed: str | None = None
        for host in hosts:
            if failed is not None:  # one host cannot start: the job fails, start no more
                host.proc = FailedStart(host.name, f"{host.name} not started: {failed} could not start")
                host.proc.note = None  # a consequence, not the root cause
                continue
            env = dict(env_common)
            env.update(
                layout.host_environment(
                    spec,
                    Path(CONTAINER_BASE_DIR),
                    {},
                    port,
                    settings.processes_per_host,
                    context.grace,
                    settings.num_gpus,
                    settings.emulate_cuda,
                )
            )
            env.update(layout.settings_environment(settings))
            # Names resolve through the containers' /etc/hosts: the runtime sees real hosts.
            env.pop(contract.SMLAUNCH_HOST_ADDRESSES, None)
            env["HOME"] = "/home/smlaunch" if settings.executor_fields(DockerSettings).uid != 0 else "/root"
            host_mounts = dict(mounts)
            host_mounts[str(host.base.resolve())] = {"bind": CONTAINER_BASE_DIR, "mode": "rw"}
            host_mounts.update(self._container_dir_mounts(context, host.paths))
            if ssh_ports:
                ssh_dir = context.job.path / SSH_DIR_NAME
                host_mounts[str(ssh_dir.resolve())] = {"bind": CONTAINER_SSH_DIR, "mode": "ro"}
                host_mounts[str((ssh_dir / "ssh_config").resolve())] = {
                    "bind": CONTAINER_SSH_CLIENT_CONFIG,
                    "mode": "ro",
                }
                env.update(ssh_environment(host.name, ssh_ports, CONTAINER_SSH_DIR, client_config=False))
            host.proc = self._start(context, host.name, env, host_mounts, names)
            if isinstance(host.proc, FailedStart):
                failed = host.name

    def _inherited_env(self) -> dict[str, str]:
        env = container_aws_configuration(os.environ)
        env.update({k: v for k, v in os.environ.items() if k.startswith(INHERITED_PREFIXES)})
        return env

    def _mounts(self, context: LaunchContext) -> dict[str, dict[str, str]]:
        return {
            str(p): {"bind": str(p), "mode": "ro"}
            for p in layout.read_only_sources(context.spec, context.job)
        }

    def _container_dir_mounts(
        self, context: LaunchContext, paths: contract.Paths
    ) -> dict[str, dict[str, str]]:
        """Checkpoints' and TensorBoard's ``LocalPath`` outside ``/opt/ml``: the host tree's
        directory (which the agent syncs) bind-mounted there. Under ``/opt/ml`` each is in the
        tree's mount already."""
        mounts: dict[str, dict[str, str]] = {}
        for local_path, (_, directory) in layout.container_dirs(context.spec, paths).items():
            directory.mkdir(parents=True, exist_ok=True)
            mounts[str(directory.resolve())] = {"bind": local_path, "mode": "rw"}
        return mounts

    def container_kwargs(
        self,
        context: LaunchContext,
        host: str,
        env: dict[str, str],
        mounts: dict[str, dict[str, str]],
        names: list[str],
    ) -> dict[str, Any]:
        """The ``containers.run`` arguments for one host (module docstring)."""
        own = context.settings.executor_fields(DockerSettings)
        uid, gid = own.uid, own.gid
        kwargs: dict[str, Any] = {
            "image": own.image,
            "command": own.arguments if own.entrypoint else ["train"],
            "name": f"{context.spec.TrainingJobName}-{host}",
            "hostname": host,
            "network_mode": "host",
            "extra_hosts": host_addresses(names),
            "environment": env,
            "volumes": mounts,
            "labels": {LABEL_JOB: context.spec.TrainingJobName, LABEL_HOST: host},
            "user": f"{uid}:{gid}",
            "shm_size": "1g",
            "detach": True,
            "stdin_open": False,
            "tty": False,
        }
        if own.entrypoint:
            kwargs["entrypoint"] = own.entrypoint
        if uid != 0:
            kwargs["group_add"] = ["0"]
        if context.settings.gpu_devices:
            import docker.types

            kwargs["device_requests"] = [docker.types.DeviceRequest(count=-1, capabilities=[["gpu"]])]
        return kwargs

    def _start(
        self,
        context: LaunchContext,
        host: str,
        env: dict[str, str],
        mounts: dict[str, dict[str, str]],
        names: list[str],
    ) -> ContainerProcess | FailedStart:
        missing = [src for src in mounts if not Path(src).exists()]
        if missing:
            return FailedStart(host, f"cannot start {host}: mount source {missing[0]} does not exist")
        kwargs = self.container_kwargs(context, host, env, mounts, names)
        client = self.agent_client()
        try:
            container = client.containers.run(**kwargs)
        except Exception as exc:
            message = f"cannot start {host} from image {kwargs['image']}: {api_message(exc)}"
            if getattr(exc, "status_code", None) == 409:
                message += (
                    f" (a container named {kwargs['name']} already exists, left by an earlier "
                    f"job of that name: `docker rm -f {kwargs['name']}`)"
                )
            return FailedStart(host, message)
        self.containers[host] = container
        streaming = container
        if self.stream_client() is not client:
            streaming = self.stream_client().containers.get(container.id)
        return ContainerProcess(container, streaming, host)

    def kill_everything(self, context: LaunchContext) -> None:
        for host in context.hosts:
            proc = host.proc
            if isinstance(proc, ContainerProcess) and proc.returncode is None:
                proc.kill()
        for host in context.hosts:
            proc = host.proc
            if isinstance(proc, ContainerProcess):
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.wait(15)

    def attempt_ended(self, context: LaunchContext) -> None:
        for container in self.containers.values():
            with contextlib.suppress(Exception):
                container.remove(force=True)
        self.containers.clear()

    def root_cause(self, context: LaunchContext) -> dict[str, Any] | None:
        """A container that could not start, or ended from outside, is the root cause: the other
        hosts' reports only say they were stopped because of it."""
        ended = [h for h in context.hosts if getattr(h.proc, "note", None) and h.exit_code not in (0, None)]
        if not ended:
            return None
        first = min(ended, key=lambda h: h.exited_at or 0.0)
        tag = "ClientError" if isinstance(first.proc, FailedStart) else "InternalServerError"
        return {
            "FailureReason": f"{tag}: {first.proc.note}",  # type: ignore[union-attr]
            "ExitCode": first.exit_code,
        }

    def close(self, context: LaunchContext) -> None:
        self.credentials.stop()
        removed = sweep(self.agent_client(), context.spec.TrainingJobName)
        if removed:
            print(f"removed leftover containers {removed}", flush=True)


def main(argv: list[str] | None = None) -> int:
    """``--reap <job dir>``: the safety net :meth:`DockerExecutor.submitted` starts."""
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 2 or args[0] != "--reap":
        print(
            "usage: python -m smlaunch.sdk.backends.emulated.executors.docker.executor --reap <job dir>",
            file=sys.stderr,
        )
        return 2
    removed = reap(JobDir(Path(args[1])))
    if removed:
        print(f"the agent died; removed its containers {removed}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
