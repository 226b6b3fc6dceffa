"""One host pod as the Kubernetes executor's agent supervises it: :class:`PodProcess`, shaped like
the ``Popen`` of a local host.

Its lines are the pod's log, followed through the API server once its container runs (before,
why the scheduler has not placed it, once per message); it has ended when the pod's phase is
``Succeeded`` or ``Failed`` (the container's exit status); SIGTERM reaches the host's process
in-band, through the agent's tree server, while it polls for signals (so the pod, and its log,
stay until the agent deletes them), else it deletes the pod with the stop grace (the kubelet sends
SIGTERM, then SIGKILL); SIGKILL deletes it at once. A pod that cannot
start (an image the node cannot pull, a bad config, a container the runtime could not run) ends
its host at once, the kubelet's reason its :attr:`PodProcess.failure`. :meth:`PodProcess.unplaced`
says why the scheduler has not placed it yet, :attr:`PodProcess.lost` why it went without the
agent asking (deleted, evicted: a spot interruption under managed spot). The executor
(:mod:`.executor`) decides what each of these means for the job.
"""

from __future__ import annotations

import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

from smlaunch.sdk.backends.kubernetes.client import kubernetes_module

POLL_SECONDS = 0.5
"""A host pod's status is read from the API server at most this often."""
CANNOT_START = frozenset(
    {
        "ErrImageNeverPull",
        "ErrImagePull",
        "ImagePullBackOff",
        "InvalidImageName",
        "CreateContainerConfigError",
        "CreateContainerError",
    }
)
"""Waiting reasons of a container that will not start without someone changing something."""
NOT_RUN = frozenset({"ContainerCannotRun", "StartError"})
"""Terminated reasons of a container the runtime could not start (a privileged pod where the node
may not grant every capability, a missing command): the kubelet's message is the host's cause."""
EVICTED = frozenset({"Evicted", "Preempting", "Shutdown", "NodeShutdown", "Terminated"})
"""``status.reason`` of a pod the kubelet ended to free its node (eviction, preemption, shutdown)."""


class LogLines:
    """``readline()`` over the chunks of a followed pod log; ``b""`` at the end, like a pipe."""

    def __init__(self, chunks: Iterator[bytes]) -> None:
        self._chunks = chunks
        self._buffer = b""

    def readline(self) -> bytes:
        while b"\n" not in self._buffer:
            chunk = next(self._chunks, b"")
            if not chunk:
                line, self._buffer = self._buffer, b""
                return line
            self._buffer += chunk
        line, _, self._buffer = self._buffer.partition(b"\n")
        return line + b"\n"


class PodProcess:
    """One host pod, shaped like the ``Popen`` the agent supervises (see the module docstring)."""

    pid = -1

    def __init__(
        self,
        core: Any,
        namespace: str,
        name: str,
        host: str,
        grace: float,
        spot: bool = False,
        in_band: Callable[[int], bool] = lambda sig: False,
    ) -> None:
        self.core = core
        self.namespace = namespace
        self.name = name
        self.host = host
        self.grace = grace
        self.returncode: int | None = None
        self.failure: str | None = None
        """Why the pod cannot start (the kubelet's reason and message), when it cannot."""
        self.spot = spot
        self.lost: str | None = None
        """Why the pod went without the agent asking (deleted, evicted), once it did."""
        self._in_band = in_band
        """Hands a signal to the host's process without deleting its pod (the agent's tree server);
        False when it cannot (the host does not poll)."""
        self._signalled: int | None = None
        self._deleted = False
        self._read_at = 0.0
        self._pod: Any = None
        self._lock = threading.Lock()
        self.log_read = threading.Event()
        """Set once the pod's log was read to its end, or can no longer be."""
        self.stdout = LogLines(self._log_chunks())

    def _read(self) -> Any:
        """The pod (None once it is gone), read at most every :data:`POLL_SECONDS`."""
        with self._lock:
            if time.monotonic() - self._read_at >= POLL_SECONDS:
                self._read_at = time.monotonic()
                try:
                    self._pod = self.core.read_namespaced_pod(self.name, self.namespace)
                except kubernetes_module().client.rest.ApiException as exc:
                    if exc.status != 404:
                        raise
                    self._pod = None
            return self._pod

    def _container(self) -> Any:
        pod = self._read()
        statuses = (pod.status.container_statuses or []) if pod is not None and pod.status else []
        return statuses[0] if statuses else None

    def refresh_lost(self) -> str | None:
        """Read the pod now (not at the poll's pace): why it went without the agent asking, or None."""
        with self._lock:
            self._read_at = 0.0
        pod = self._read()
        if self._signalled is None and self.lost is None:
            self.lost = _lost(pod)
        return self.lost if self._signalled is None else None

    def unplaced(self) -> str | None:
        """None once the scheduler placed the pod (bound to a node; or it ended, or went); until
        then the scheduler's reason for not placing it, ``""`` before it gave one."""
        if self.returncode is not None:
            return None
        pod = self._read()
        if pod is None:
            return None  # gone: poll() ends its host
        phase = pod.status.phase if pod.status is not None else None
        if phase not in (None, "Pending") or (pod.spec is not None and pod.spec.node_name):
            return None  # running or ended, or bound to a node (its containers starting)
        return _unschedulable(pod) or ""

    def poll(self) -> int | None:
        if self.returncode is not None:
            return self.returncode
        pod = self._read()
        if self._signalled is None and self.lost is None:
            self.lost = _lost(pod)
        if self.spot and self.lost is not None and self._signalled is None:
            return None  # a spot interruption, which the agent ends by signalling every host
        if pod is None:  # deleted: by us (a stop, a failure elsewhere) or from outside
            self.returncode = 128 + (self._signalled or signal.SIGKILL)
            return self.returncode
        container = self._container()
        state = container.state if container is not None else None
        if state is not None and state.terminated is not None and pod.status.phase in ("Succeeded", "Failed"):
            self.returncode = int(state.terminated.exit_code)
            if state.terminated.reason in NOT_RUN:
                self.failure = f"{state.terminated.reason}: {state.terminated.message or ''}".rstrip(": ")
        elif pod.status.phase in ("Succeeded", "Failed"):
            self.returncode = 0 if pod.status.phase == "Succeeded" else 1
        elif state is not None and state.waiting is not None and state.waiting.reason in CANNOT_START:
            self.failure = f"{state.waiting.reason}: {state.waiting.message or ''}".rstrip(": ")
            self._delete(signal.SIGKILL)
            self.returncode = 1
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while (code := self.poll()) is None:
            if deadline is not None and time.monotonic() > deadline:
                raise subprocess.TimeoutExpired(self.name, timeout or 0)
            time.sleep(POLL_SECONDS / 2)
        return code

    def send_signal(self, sig: int) -> None:
        """SIGTERM/SIGINT: to the host's process in-band when it listens, else by deleting the pod
        with the stop grace; SIGKILL: delete the pod at once; others: ignored. A deleted pod's
        container is removed by the kubelet the moment it ends, its log with it, so the in-band
        way keeps the host's last lines ("stopped by SIGTERM", why a rank failed) readable until
        :meth:`KubernetesExecutor.kill_everything` deletes the pod. A pod that already ended takes
        no signal, as an ended ``Popen`` takes none."""
        if sig not in (signal.SIGTERM, signal.SIGINT, signal.SIGKILL) or self.returncode is not None:
            return
        self._signalled = self._signalled or sig
        if sig != signal.SIGKILL and self._in_band(sig):
            return
        self._delete(sig)

    def _delete(self, sig: int) -> None:
        """Delete the pod as ``sig`` asks (SIGKILL: grace 0), remembering that the agent did."""
        self._signalled = self._signalled or sig
        self._deleted = True
        grace = 0 if sig == signal.SIGKILL else max(1, round(self.grace))
        delete_pod(self.core, self.namespace, self.name, grace)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    @property
    def ended_on_its_own(self) -> bool:
        """Whether the pod's container ended without the agent deleting the pod (its last lines
        may still be on their way through the log)."""
        return self.returncode is not None and not self._deleted

    def _log_chunks(self) -> Iterator[bytes]:
        """:meth:`_follow_log`, then :attr:`log_read` set."""
        try:
            yield from self._follow_log()
        finally:
            self.log_read.set()

    def _follow_log(self) -> Iterator[bytes]:
        """The pod's log once its container runs (or ended), followed to its end; before, why the
        scheduler has not placed it (once per message)."""
        said = None
        while True:
            if self.returncode is not None and self._pod is None:
                return
            container = self._container()
            if self._read() is None:
                return
            state = container.state if container is not None else None
            if state is not None and (state.running is not None or state.terminated is not None):
                break
            if self.failure is not None:
                yield f"[smlaunch] {self.host} cannot start: {self.failure}\n".encode()
                return
            pending = _unschedulable(self._pod)
            if pending is not None and pending != said:
                said = pending
                yield f"[smlaunch] {self.host} is pending: {pending}\n".encode()
            time.sleep(POLL_SECONDS)
        try:
            response = self.core.read_namespaced_pod_log(
                self.name, self.namespace, follow=True, _preload_content=False
            )
            yield from response.stream(1 << 16, decode_content=True)
        except Exception as exc:  # the pod went away while it was read: its lines end here
            yield f"[smlaunch] {self.host}: its log ended early ({type(exc).__name__})\n".encode()


def _unschedulable(pod: Any) -> str | None:
    """The scheduler's message for a pod it could not place (``0/1 nodes are available: ...``)."""
    if pod is None or pod.status is None or pod.status.phase != "Pending":
        return None
    for condition in pod.status.conditions or []:
        if condition.type == "PodScheduled" and condition.status == "False" and condition.message:
            return str(condition.message)
    return None


def _lost(pod: Any) -> str | None:
    """Why a pod the agent did not signal is going: deleted (gone, or terminating) or evicted."""
    if pod is None:
        return "deleted"
    if pod.metadata is not None and pod.metadata.deletion_timestamp is not None:
        return "deleted"
    if pod.status is not None and pod.status.phase == "Failed" and pod.status.reason in EVICTED:
        return f"{pod.status.reason}: {pod.status.message or ''}".rstrip(": ")
    return None


def delete_pod(core: Any, namespace: str, name: str, grace: int) -> None:
    """Delete a pod; one already gone is fine."""
    try:
        core.delete_namespaced_pod(name, namespace, grace_period_seconds=grace)
    except kubernetes_module().client.rest.ApiException as exc:
        if exc.status != 404:
            raise
