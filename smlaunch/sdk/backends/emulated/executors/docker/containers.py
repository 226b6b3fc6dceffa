"""Docker containers as the hosts the local agent supervises, and the engine they run on.

:class:`ContainerProcess` makes a started container look like the ``subprocess.Popen`` the agent
polls and signals (:class:`~smlaunch.sdk.backends.emulated.executors.base.HostProcess`);
:class:`FailedStart` is a host whose container could not start. :func:`docker_client` finds an
engine that answers (or says how to start one); :func:`sweep` and :func:`reap` remove a job's
containers by label. Used by :mod:`smlaunch.sdk.backends.emulated.executors.docker.executor`.
"""

from __future__ import annotations

import contextlib
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from typing import Any

from smlaunch.sdk.backends.emulated.state import JobDir
from smlaunch.sdk.errors import ConfigurationError

LABEL_JOB = "smlaunch.job"
LABEL_HOST = "smlaunch.host"
START_FAILED_EXIT_CODE = 125
"""What ``docker run`` exits with when the container cannot be created or started."""


NO_ENGINE_FIX = (
    "start a Docker engine (e.g. `sudo dockerd --storage-driver=vfs --iptables=false --bridge=none &`, "
    "or `sudo systemctl start docker`) and make sure DOCKER_HOST or /var/run/docker.sock reaches it; "
    "or run the job as processes with LocalSession(executor='process')"
)


API_TIMEOUT_SECONDS = 900.0
"""Creating a container can take minutes: with the vfs storage driver (the only one in some CI and
rootless setups) the engine copies the image's whole file system (about 1.4 GB) per container."""
PING_TIMEOUT_SECONDS = 30.0


def docker_client(timeout: float | None = API_TIMEOUT_SECONDS) -> Any:
    """A Docker SDK client from the environment (DOCKER_HOST, ...) that answers a ping.

    ``timeout`` bounds each API request once the engine answered (``None``: unbounded, for log
    streams and waits). Raises ConfigurationError saying how to start an engine, or to use the
    process executor.
    """
    try:
        import docker
    except ImportError:
        raise ConfigurationError(
            "executor",
            "docker",
            "the `docker` Python package is not installed",
            "pip install 'smlaunch[docker]' (or docker>=7), or use LocalSession(executor='process')",
        ) from None
    try:
        client = docker.from_env(timeout=int(PING_TIMEOUT_SECONDS))
        client.ping()
        client.api.timeout = timeout
    except Exception as exc:
        raise ConfigurationError(
            "executor", "docker", f"no Docker engine answers ({type(exc).__name__}: {exc})", NO_ENGINE_FIX
        ) from None
    return client


def docker_errors() -> Any:
    """``docker.errors`` (imported when first needed: only Docker jobs load the SDK)."""
    import docker.errors

    return docker.errors


class ContainerProcess:
    """A started container, shaped like the ``subprocess.Popen`` the local agent supervises.

    ``poll()``/``wait()`` report the container's exit code (``128 + N`` when killed by signal N, as
    Docker reports it); ``send_signal``/``terminate``/``kill`` signal its PID 1 (tini, which forwards
    to the runtime); ``stdout.readline()`` yields its merged output line by line, and after the last
    line one line of smlaunch's own when the container ended in a way the runtime could not report
    (killed or removed from outside smlaunch, out of memory).
    """

    def __init__(self, container: Any, stream_container: Any, host: str) -> None:
        self.container = container
        self.host = host
        self.pid = -1  # not a child of the agent; the agent's process-tree sweep skips it
        self.returncode: int | None = None
        self.signalled = False
        self.note: str | None = None
        self._exited = threading.Event()
        self._stream_container = stream_container
        self.stdout = _LineReader(self._chunks())
        self._waiter = threading.Thread(target=self._wait, name=f"wait-{host}", daemon=True)
        self._waiter.start()

    def _wait(self) -> None:
        errors = docker_errors()
        code = 137
        while True:
            try:
                code = int(self._stream_container.wait().get("StatusCode", 137))
                break
            except errors.NotFound:
                self.note = f"container {self.container.name} was removed from outside smlaunch"
                break
            except Exception:  # a dropped connection to the engine: ask again unless it is gone
                time.sleep(0.5)
                try:
                    self.container.reload()
                except errors.NotFound:
                    self.note = f"container {self.container.name} was removed from outside smlaunch"
                    break
                except Exception:
                    continue
                if self.container.status in ("exited", "dead"):
                    code = int(self.container.attrs["State"].get("ExitCode", 137))
                    break
        if self.note is None and code != 0:
            self.note = self._diagnose(code)
        self.returncode = code
        self._exited.set()

    def _diagnose(self, code: int) -> str | None:
        with contextlib.suppress(Exception):
            self.container.reload()
            state = self.container.attrs.get("State", {})
            if state.get("OOMKilled"):
                return f"container {self.container.name} was killed: out of memory (exit code {code})"
        if code == 137 and not self.signalled:
            return (
                f"container {self.container.name} was killed from outside smlaunch (exit code 137, SIGKILL)"
            )
        return None

    def _chunks(self) -> Iterator[bytes]:
        with contextlib.suppress(Exception):
            yield from self._stream_container.logs(stream=True, follow=True, stdout=True, stderr=True)
        self._exited.wait(30)
        if self.note:
            yield f"\n[smlaunch] {self.note}\n".encode()

    def poll(self) -> int | None:
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if not self._exited.wait(timeout):
            raise subprocess.TimeoutExpired(f"container {self.container.name}", timeout or 0)
        assert self.returncode is not None
        return self.returncode

    def send_signal(self, sig: int) -> None:
        if self.returncode is not None:
            return
        self.signalled = True
        with contextlib.suppress(Exception):  # already gone: nothing to signal
            self.container.kill(signal=int(sig))

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


class FailedStart:
    """A host whose container could not be created or started: it 'exited' with 125 and says why."""

    def __init__(self, host: str, message: str) -> None:
        self.host = host
        self.pid = -1
        self.returncode = START_FAILED_EXIT_CODE
        self.note: str | None = message
        self.stdout = _LineReader(iter([f"[smlaunch] {message}\n".encode()]))

    def poll(self) -> int:
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        return self.returncode

    def send_signal(self, sig: int) -> None:
        return None

    def terminate(self) -> None:
        return None

    def kill(self) -> None:
        return None


class _LineReader:
    """``readline()`` over an iterator of byte chunks; ``b""`` at the end, like a pipe."""

    def __init__(self, chunks: Iterator[bytes]) -> None:
        self._chunks = chunks
        self._buffer = b""
        self._done = False

    def readline(self) -> bytes:
        while b"\n" not in self._buffer and not self._done:
            try:
                self._buffer += next(self._chunks)
            except StopIteration:
                self._done = True
        if b"\n" in self._buffer:
            line, self._buffer = self._buffer.split(b"\n", 1)
            return line + b"\n"
        line, self._buffer = self._buffer, b""
        return line


def sweep(client: Any, job_name: str) -> list[str]:
    """Remove (force) every container labelled with ``job_name``; returns their names."""
    removed = []
    for container in client.containers.list(all=True, filters={"label": f"{LABEL_JOB}={job_name}"}):
        with contextlib.suppress(Exception):
            container.remove(force=True)
            removed.append(container.name)
    return removed


def api_message(exc: Exception) -> str:
    """The engine's explanation of a failed request, else the exception's text."""
    explanation = getattr(exc, "explanation", None)
    return str(explanation or exc)


def reap(job: JobDir, client: Any | None = None, poll_seconds: float = 1.0) -> list[str]:
    """Wait until the job's agent is gone, then remove any container it left (its safety net)."""
    while job.agent_alive() is not False:
        time.sleep(poll_seconds)
    return sweep(client or docker_client(), job.name)
