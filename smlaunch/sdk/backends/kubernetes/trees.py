"""The agent's side of the host pods' trees: a small HTTP server in the agent pod.

``GET /<host>/tree.tar``: the host's ``/opt/ml`` tree as the agent wrote it (config files,
channels: links followed, so a host gets the data and not the agent's paths);
``GET /<host>/signal``: the agent's next signal for the host, in-band (its number, or nothing once
:data:`~.host.SIGNAL_WAIT_SECONDS` passed without one): the host pod's entry polls it and passes
the signal to its runtime, so that stopping a host need not delete its pod, whose log (the host's
last lines) goes with it (:meth:`TreeServer.signal`);
``PUT /<host>/result.tar``: the host's ``model/`` and ``output/`` at its end, extracted
with the shared safe extractor into a scratch directory and then merged into the host's tree, where
the agent's packaging and failure reports read them; with checkpoints, also the host's checkpoint
directory (while it runs, and at its end), which replaces the tree's (files the script deleted go),
where the agent's checkpoint sync finds it. Every request carries the job's token (random per
job, in the job's Secret; header :data:`~.host.TOKEN_HEADER`), which keeps other pods from reading
or writing a job's trees by guessing its name; a wrong one is answered like an unknown host. The
token is never part of a URL, so no pod spec, log or error message holds it. The host side is
:mod:`smlaunch.sdk.backends.kubernetes.host`.
"""

from __future__ import annotations

import secrets
import shutil
import tarfile
import tempfile
import threading
import time
from collections.abc import Callable, Mapping
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from smlaunch.contract.archive import safe_extract
from smlaunch.sdk.backends.kubernetes.host import SIGNAL_WAIT_SECONDS, TOKEN_HEADER

LISTENING_SECONDS = SIGNAL_WAIT_SECONDS + 5.0
"""A host that polled for signals within this long is listening (polls follow each other at once)."""


class TreeServer:
    """Serves each host's tree and takes its results (see the module docstring)."""

    def __init__(self, token: str, bind: str = "0.0.0.0") -> None:
        if not token:
            raise ValueError("the tree server needs the job's token (SMLAUNCH_K8S_TREE_TOKEN is empty)")
        self.token = token
        self._hosts: dict[str, Path] = {}
        self._checkpoints: str | None = None
        self.keeps_output: Callable[[str], bool] = lambda host: True
        """Asked as a host hands back its results: False drops its ``output/`` (the executor's
        :meth:`~.executor.KubernetesExecutor.keeps_output`)."""
        self.received: set[str] = set()
        self._signals: dict[str, int] = {}
        self._polled: dict[str, float] = {}
        self._signal_ready = threading.Condition()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: object) -> None:  # quiet: the job log is the user's
                return None

            def _host(self, leaf: str) -> Path | None:
                parts = self.path.strip("/").split("/")
                given = self.headers.get(TOKEN_HEADER) or ""
                if len(parts) != 2 or not secrets.compare_digest(given, server.token) or parts[1] != leaf:
                    return None
                return server._hosts.get(parts[0])

            def do_GET(self) -> None:
                if self._host("signal") is not None:
                    sig = server.next_signal(self.path.strip("/").split("/")[0])
                    body = b"" if sig is None else str(sig).encode()
                    self.send_response(HTTPStatus.OK)
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)
                    return
                base = self._host("tree.tar")
                if base is None:
                    self.send_error(HTTPStatus.NOT_FOUND)
                    return
                with tempfile.TemporaryFile() as scratch:
                    with tarfile.open(fileobj=scratch, mode="w", dereference=True) as tar:
                        for entry in sorted(base.iterdir()):
                            tar.add(entry, arcname=entry.name)
                    size = scratch.tell()
                    scratch.seek(0)
                    self.send_response(HTTPStatus.OK)
                    self.send_header("Content-Length", str(size))
                    self.end_headers()
                    shutil.copyfileobj(scratch, self.wfile)

            def do_PUT(self) -> None:
                base = self._host("result.tar")
                if base is None:
                    self.send_error(HTTPStatus.NOT_FOUND)
                    return
                length = int(self.headers.get("Content-Length") or 0)
                with tempfile.TemporaryDirectory() as scratch:
                    archive = Path(scratch) / "result.tar"
                    with open(archive, "wb") as handle:
                        remaining = length
                        while remaining > 0:
                            chunk = self.rfile.read(min(remaining, 1 << 20))
                            if not chunk:
                                break
                            handle.write(chunk)
                            remaining -= len(chunk)
                    staged = Path(scratch) / "result"
                    try:
                        safe_extract(archive, staged)
                    except ValueError as error:
                        self.send_error(HTTPStatus.BAD_REQUEST, str(error)[:200])
                        return
                    host = self.path.strip("/").split("/")[0]
                    kept = ("model", "output") if server.keeps_output(host) else ("model",)
                    for name in kept:
                        if (staged / name).is_dir():
                            shutil.copytree(staged / name, base / name, symlinks=True, dirs_exist_ok=True)
                    if server._checkpoints is not None and (staged / server._checkpoints).is_dir():
                        mirror(staged / server._checkpoints, base / server._checkpoints)
                server.received.add(self.path.strip("/").split("/")[0])
                self.send_response(HTTPStatus.OK)
                self.send_header("Content-Length", "0")
                self.end_headers()

        self._server = ThreadingHTTPServer((bind, 0), Handler)
        self._server.daemon_threads = True
        self.port = int(self._server.server_address[1])
        self._thread = threading.Thread(target=self._server.serve_forever, name="trees", daemon=True)
        self._thread.start()

    def serve(self, hosts: Mapping[str, Path], checkpoints: str | None = None) -> None:
        """Serve these hosts' trees (one attempt's), and forget the previous attempt's results;
        ``checkpoints``: the checkpoint directory relative to the tree the hosts hand back."""
        self._hosts = dict(hosts)
        self._checkpoints = checkpoints
        self.received = set()
        with self._signal_ready:
            self._signals, self._polled = {}, {}

    def signal(self, host: str, sig: int) -> bool:
        """Hand ``sig`` to ``host``'s pod in-band, when it is listening (it polled within
        :data:`LISTENING_SECONDS`); False when it is not: the caller deletes the pod instead."""
        with self._signal_ready:
            polled = self._polled.get(host)
            if polled is None or time.monotonic() - polled > LISTENING_SECONDS:
                return False
            self._signals[host] = sig
            self._signal_ready.notify_all()
            return True

    def next_signal(self, host: str, wait: float = SIGNAL_WAIT_SECONDS) -> int | None:
        """``host``'s next signal, waiting up to ``wait`` seconds for one (a host's poll)."""
        with self._signal_ready:
            self._polled[host] = time.monotonic()
            self._signal_ready.wait_for(lambda: host in self._signals, timeout=wait)
            self._polled[host] = time.monotonic()
            return self._signals.pop(host, None)

    def url(self, address: str, host: str) -> str:
        """What host ``host``'s pod is told (``SMLAUNCH_K8S_TREE``), reaching the agent at ``address``."""
        return f"http://{address}:{self.port}/{host}"

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()


def mirror(source: Path, target: Path) -> None:
    """Make ``target`` hold what ``source`` holds: new and changed files copied (times kept, so an
    unchanged file stays unchanged for the checkpoint sync), files gone from ``source`` removed.
    Never empties ``target`` on the way, since the sync may scan it at any moment."""
    shutil.copytree(source, target, symlinks=True, dirs_exist_ok=True)
    for path in sorted(target.rglob("*"), reverse=True):  # children before their directories
        relative = path.relative_to(target)
        if (source / relative).is_symlink() or (source / relative).exists():
            continue
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink(missing_ok=True)
