"""The Kubernetes executor: each host of a job is one pod, started by the job's agent pod.

The agent (:mod:`smlaunch.sdk.backends.kubernetes.agent`) writes every host's ``/opt/ml`` tree in
its own pod, as every agent does, and serves it (:class:`~.trees.TreeServer`); for each attempt
this executor creates the host pods planned at submit (``settings.json``'s ``host_pods``), each
told where its tree is (``SMLAUNCH_K8S_TREE``) and the runtime's variables
(:func:`~smlaunch.sdk.backends.emulated.layout.host_environment`; the hosts find each other by name:
``hostAliases`` on a host network, the job's headless Service elsewhere). A host is a
:class:`~.pods.PodProcess` (its log, its exit status, signals in-band or as deletions); a pod that cannot
start ends its host at once, the kubelet's reason its root cause. Until the scheduler has placed
every host pod of the attempt, :meth:`KubernetesExecutor.waiting` gives the agent its reason, so
that the job's recorded state (what ``describe``, ``attach`` and the CLI read from the root) says
``Starting`` with it, then ``Training`` once all are on a node.

MPI across pods (``mpi`` without smp model parallelism, several hosts): the runtime's multi-node
roles (:mod:`smlaunch.runtime.launchers.mpi.roles`: workers serve sshd, the master runs ``mpirun``
over ssh). For each attempt the agent makes fresh keys and configs
(:func:`~smlaunch.sdk.backends.emulated.executors.ssh.write_ssh_material`, shared with the Docker
executor) and puts them in every host's tree at :data:`POD_SSH_DIR` (the host's own
``sshd_config-algo-N``, the keys, the client config), which the tree server hands only to requests
holding the job's token; the variables (``SMLAUNCH_SSHD_CONFIG``, ``SMLAUNCH_SSH_PORTS``,
``SMLAUNCH_SSH_CONFIG``) name paths and ports, never a key. On a host network each host's sshd
listens on its own loopback address (the plan's ``hostAliases``) and a free port of the node; on a
pod network on every address of its pod at :data:`POD_SSH_PORT` (unprivileged: the image's user
need not be root).

Managed spot (``use_spot_instances``): a host pod deleted or evicted by anyone but the agent (a node
drained or reclaimed, ``kubectl delete pod``) is *lost*, not failed: its host reads as running until
the agent signals it, and :meth:`KubernetesExecutor.watch` asks the agent for a spot interruption
(:data:`~smlaunch.sdk.backends.emulated.spot.INTERRUPT_FILE`), so the attempt ends ``Interrupted``
and the next one starts on fresh pods from the checkpoints, as a local spot run does. The hosts hand
their checkpoint directory back to the agent (:mod:`.host`) while they run and at their end; the
agent's checkpoint sync uploads it. Without spot, a lost pod fails its host.
"""

from __future__ import annotations

import copy
import functools
import json
import os
import shutil
import threading
import time
from pathlib import Path
from typing import Any, ClassVar

from smlaunch import contract
from smlaunch.contract.processes import free_port
from smlaunch.sdk.backends.emulated import layout
from smlaunch.sdk.backends.emulated.executors.base import Executor, LaunchContext
from smlaunch.sdk.backends.emulated.executors.ssh import (
    SSH_DIR_NAME,
    host_addresses,
    ssh_environment,
    uses_mpi,
    write_ssh_material,
)
from smlaunch.sdk.backends.emulated.job_settings import JobSettings, KubernetesSettings
from smlaunch.sdk.backends.emulated.spot import INTERRUPT_FILE
from smlaunch.sdk.backends.kubernetes.client import kubernetes_module
from smlaunch.sdk.backends.kubernetes.host import TREE_TOKEN_ENV
from smlaunch.sdk.backends.kubernetes.plan import JOB_LABEL, ROLE_LABEL
from smlaunch.sdk.backends.kubernetes.pods import POLL_SECONDS, LogLines, PodProcess, delete_pod
from smlaunch.sdk.backends.kubernetes.trees import TreeServer
from smlaunch.sdk.request.spec import TrainingJobSpec

GONE_SECONDS = 120.0
"""How long :meth:`KubernetesExecutor.kill_everything` waits for the host pods to be gone."""
DRAIN_SECONDS = 10.0
"""How long :meth:`KubernetesExecutor.kill_everything` waits, before deleting a host pod that ended
on its own, for its log to be read to the end (the log goes with the pod)."""
CHECKPOINTS_ENV = "SMLAUNCH_K8S_CHECKPOINTS"
"""The checkpoint directory below ``/opt/ml`` a host hands back to the agent (unset: none)."""
ADDRESS_ENV = "SMLAUNCH_K8S_AGENT_ADDRESS"
"""The agent pod's address the hosts reach it at (its pod IP; 127.0.0.1 on a host network)."""
POD_SSH_DIR = "/opt/ml/.smlaunch-ssh"
"""Where an MPI job's ssh keys and configs are in a host pod (in its tree, outside what it hands back)."""
POD_SSH_PORT = 2222
"""Each host's sshd port on a pod network (every pod has its own addresses)."""


def _checkpoints_below_opt_ml(spec: TrainingJobSpec) -> str | None:
    """The checkpoint directory relative to ``/opt/ml`` (what a host hands back), or None."""
    local_path = layout.checkpoint_local_path(spec)
    relative = None if local_path is None else layout.below_opt_ml(local_path)
    return None if relative is None else str(relative)


class KubernetesExecutor(Executor):
    """Hosts as pods; see the module docstring. Made in the agent pod (:meth:`for_agent`)."""

    name: ClassVar[str] = "kubernetes"
    hosts_called: ClassVar[str] = "pods"
    layered_requirements: ClassVar[bool] = False
    hosts_deliver_streams: ClassVar[bool] = True

    def __init__(self, fields: KubernetesSettings, core: Any, trees: TreeServer, address: str) -> None:
        self.fields = fields
        self.core = core
        self.trees = trees
        self.address = address
        self.pods: dict[str, PodProcess] = {}
        self._interrupted = False
        self._context: LaunchContext | None = None
        self._lock = threading.Lock()
        trees.keeps_output = self.keeps_output

    def settings(self, spec: TrainingJobSpec) -> KubernetesSettings:
        return self.fields

    @classmethod
    def for_agent(cls, settings: JobSettings) -> KubernetesExecutor:
        """In the agent pod: the in-cluster client, and a tree server the hosts reach."""
        fields = settings.executor_fields(KubernetesSettings)
        kubernetes = kubernetes_module()
        configuration = kubernetes.client.Configuration()
        kubernetes.config.load_incluster_config(client_configuration=configuration)
        core = kubernetes.client.CoreV1Api(kubernetes.client.ApiClient(configuration))
        address = "127.0.0.1" if fields.host_network else os.environ.get(ADDRESS_ENV, "")
        bind = "127.0.0.1" if fields.host_network else "0.0.0.0"
        trees = TreeServer(os.environ.get(TREE_TOKEN_ENV, ""), bind)  # from the job's Secret
        return cls(fields, core, trees, address)

    def prepare(self, context: LaunchContext) -> None:
        if not self.fields.host_network:
            return
        for host in context.hosts:  # every host on the node's loopback
            config = json.loads(host.paths.resource_config_file.read_text())
            config["network_interface_name"] = "lo"
            host.paths.resource_config_file.write_text(json.dumps(config))

    def launch(self, context: LaunchContext) -> None:
        spec, settings = context.spec, context.settings
        checkpoints = _checkpoints_below_opt_ml(spec)
        self.trees.serve({host.name: host.base for host in context.hosts}, checkpoints)
        self._interrupted, self._context = False, context
        port = free_port()
        names = [host.name for host in context.hosts]
        ssh_ports = self._ssh_material(context)
        context.say(
            f"Job {spec.TrainingJobName}: {len(names)} pod(s) {names} in namespace "
            f"{self.fields.namespace}, image {self.fields.host_pods[0]['spec']['containers'][0]['image']}, "
            # No rank count: a ModelTrainer's process_count_per_node is the host runtime's to read.
            f"master {names[0]}:{port}, "
            f"stop grace {context.grace:g} s, max run {spec.StoppingCondition.MaxRuntimeInSeconds} s"
            + (f", sshd ports {ssh_ports}" if ssh_ports else "")
        )
        for host in context.hosts:
            pod = copy.deepcopy(self.fields.host_pods[host.index])
            env = layout.host_environment(
                spec,
                Path("/opt/ml"),
                {},
                port,
                settings.processes_per_host,
                context.grace,
                settings.num_gpus,
                settings.emulate_cuda,
            )
            env.update(layout.settings_environment(settings))
            env.update(settings.s3_environment())
            env.pop(contract.SMLAUNCH_HOST_ADDRESSES, None)  # names resolve in the pods
            env["SMLAUNCH_K8S_TREE"] = self.trees.url(self.address, host.name)
            checkpoints = _checkpoints_below_opt_ml(spec)
            if checkpoints is not None:
                env[CHECKPOINTS_ENV] = checkpoints
            if ssh_ports:
                env.update(ssh_environment(host.name, ssh_ports, POD_SSH_DIR, client_config=True))
            container = pod["spec"]["containers"][0]
            given = {item["name"] for item in container["env"]}
            container["env"] += [{"name": k, "value": v} for k, v in sorted(env.items()) if k not in given]
            name = pod["metadata"]["name"]
            spot = bool(spec.EnableManagedSpotTraining)
            proc = PodProcess(
                self.core,
                self.fields.namespace,
                name,
                host.name,
                context.grace,
                spot,
                functools.partial(self.trees.signal, host.name),
            )
            try:
                self.core.create_namespaced_pod(self.fields.namespace, pod)
            except kubernetes_module().client.rest.ApiException as exc:
                proc.returncode, proc.failure = 1, f"the API server refused the pod: {exc.reason}: {exc.body}"
                proc.stdout = LogLines(
                    iter([f"[smlaunch] {host.name} not started: {proc.failure}\n".encode()])
                )
            self.pods[host.name] = proc
            host.proc = proc

    def _ssh_material(self, context: LaunchContext) -> dict[str, int]:
        """An MPI job's fresh ssh keys and configs in every host's tree (module docstring); returns
        each host's sshd port (empty: no MPI between pods)."""
        names = [host.name for host in context.hosts]
        if not uses_mpi(context.spec) or len(names) < 2:
            return {}
        if self.fields.host_network:
            ports = {name: free_port() for name in names}
            addresses: dict[str, str] | None = host_addresses(names)
        else:
            ports, addresses = dict.fromkeys(names, POD_SSH_PORT), None
        made = context.job.path / SSH_DIR_NAME
        write_ssh_material(made, ports, host_dir=POD_SSH_DIR, addresses=addresses)
        try:
            for host in context.hosts:
                target = host.base / Path(POD_SSH_DIR).relative_to("/opt/ml")
                if target.exists():
                    shutil.rmtree(target)
                target.mkdir(mode=0o700)
                for path in made.iterdir():
                    if not path.name.startswith("sshd_config-") or path.name == f"sshd_config-{host.name}":
                        shutil.copy2(path, target / path.name)  # 0600 kept: ssh refuses keys others read
        finally:
            shutil.rmtree(made)  # the trees hold them now, nothing else
        return ports

    def waiting(self, context: LaunchContext) -> str | None:
        """The first host pod the scheduler has not placed, with its reason (``algo-2: Pending:
        0/1 nodes are available: 1 Insufficient cpu.``); ``""`` while it has not answered; None
        once every host pod is on a node (the agent then records ``Training``)."""
        unanswered = False
        for host in context.hosts:
            proc = self.pods.get(host.name)
            reason = proc.unplaced() if proc is not None else None
            if reason:
                return f"{host.name}: Pending: {reason}"
            unanswered = unanswered or reason == ""
        return "" if unanswered else None

    def watch(self, context: LaunchContext) -> None:
        """A spot job's host pod lost (deleted or evicted from outside): ask for an interruption."""
        for host in context.hosts:
            proc = self.pods.get(host.name)
            if proc is not None and proc.spot and proc.lost is not None and proc.returncode is None:
                self._interrupt(proc)

    def _interrupt(self, proc: PodProcess) -> None:
        """Ask the agent for a spot interruption (once per attempt): ``proc``'s pod was lost."""
        with self._lock:
            if self._interrupted or self._context is None:
                return
            self._interrupted = True
        self._context.say(f"{proc.host}: pod {proc.name} {proc.lost}: a spot interruption")
        (self._context.job.path / INTERRUPT_FILE).touch()

    def keeps_output(self, host: str) -> bool:
        """Whether a host's ``output/`` (its failure report) counts, asked by the tree server as the
        host hands it back. Under a spot job every host pod is read at that moment: when one was
        lost, the attempt is interrupted first, and no report handed back after that counts (the
        lost host's "stopped by SIGTERM", a peer's rank failing on the lost one), so that neither
        reads as the job's failure."""
        procs = list(self.pods.values())
        if not any(proc.spot for proc in procs):
            return True
        for proc in procs:
            if proc.returncode is None and proc.refresh_lost() is not None:
                self._interrupt(proc)
        return not self._interrupted

    def root_cause(self, context: LaunchContext) -> dict[str, Any] | None:
        for host in context.hosts:
            proc = self.pods.get(host.name)
            if proc is not None and proc.failure is not None:
                return {
                    "FailureReason": f"ClientError: {host.name} could not start: {proc.failure}",
                    "ExitCode": 1,
                }
        return None

    def _host_pods(self) -> list[Any]:
        base = self.fields.host_pods[0]["metadata"]["labels"][JOB_LABEL]
        selector = f"{JOB_LABEL}={base},{ROLE_LABEL}=host"
        return list(self.core.list_namespaced_pod(self.fields.namespace, label_selector=selector).items)

    def kill_everything(self, context: LaunchContext) -> None:
        """Delete every host pod of the job at once (grace 0: SIGKILL, even for one already
        terminating) and wait until they are gone. A pod whose container ended on its own (or
        after an in-band signal) is deleted once its log was read to the end
        (:data:`DRAIN_SECONDS` at most): a script that prints its result and exits at once would
        otherwise lose those lines, and the metrics in them, with the pod."""
        drained = time.monotonic() + DRAIN_SECONDS
        for proc in self.pods.values():
            if proc.ended_on_its_own:
                proc.log_read.wait(max(0.0, drained - time.monotonic()))
        deadline = time.monotonic() + GONE_SECONDS
        while pods := self._host_pods():
            for pod in pods:
                delete_pod(self.core, self.fields.namespace, pod.metadata.name, 0)
            if time.monotonic() > deadline:
                names = [pod.metadata.name for pod in pods]
                context.say(f"host pods still there after {GONE_SECONDS:g} s: {names}")
                return
            time.sleep(POLL_SECONDS)

    def attempt_ended(self, context: LaunchContext) -> None:
        self.kill_everything(context)  # their names are the next attempt's

    def close(self, context: LaunchContext) -> None:
        self.kill_everything(context)
        self.trees.close()
