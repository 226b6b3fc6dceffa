"""A host pod's entry (``python3 -m smlaunch.sdk.backends.kubernetes.host``): fetch the host's
``/opt/ml`` tree from the job's agent, run the host runtime, hand ``model/`` and ``output/`` back.

The agent (:mod:`smlaunch.sdk.backends.kubernetes.agent`) wrote the tree as every executor's agent
does (config files, channels); it serves it at ``$SMLAUNCH_K8S_TREE/tree.tar`` and takes the
results at ``$SMLAUNCH_K8S_TREE/result.tar`` (:mod:`smlaunch.sdk.backends.kubernetes.trees`), each
request carrying the job's token (``$SMLAUNCH_K8S_TREE_TOKEN``, from the job's Secret), so
that its packaging and failure reports read the host's files as on every other platform. The
runtime runs as a child (``python -m smlaunch.runtime``), its output this pod's log; the agent's
signals (``stop()``, a failure elsewhere, ``max_run``) are forwarded to it, whether they come
in-band (polled from ``$SMLAUNCH_K8S_TREE/signal``: the pod stays, so its log can be read to the
end) or as SIGTERM and SIGINT (the pod deleted, when this process does not poll), and
this process exits with its status (``128 + N`` for signal ``N``). With checkpoints
(``SMLAUNCH_K8S_CHECKPOINTS``: their directory below ``/opt/ml``), that directory goes back too,
every :data:`CHECKPOINT_SECONDS` while the runtime runs (when something in it changed) and at
its end, so that a pod deleted or evicted under a spot job leaves its last checkpoint for the
next attempt. Until the tree is in place: standard library only, plus the shared layer's safe
extractor, since it runs before anything of the job is trusted.

FastFile (``s3://``) and Pipe channels must be on this host, not in the agent's pod: the agent
decided this host's share of each and wrote it into the tree
(:mod:`smlaunch.sdk.backends.emulated.handoff`); before the runtime starts, this process delivers
them with the local agent's own code (:meth:`~smlaunch.sdk.backends.emulated.data.JobData.
deliver_handed_off`: a FUSE mount per FastFile channel, Pipe FIFOs fed while the job runs). FUSE
only where the session asked for it (``SMLAUNCH_K8S_FUSE=1``: ``KubernetesSession(fuse=True)``
makes the pod privileged, which gives it ``/dev/fuse``); otherwise, or where the image lacks it,
FastFile is delivered with File semantics and the job log says why. A channel that fails while
the script runs (an object gone) ends the runtime (SIGTERM) and this host with ``output/
failure.json`` saying ``ClientError: Data download failed: ...``, as the local agent fails the job.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import Any

from smlaunch.contract.archive import safe_extract

TREE_ENV = "SMLAUNCH_K8S_TREE"
TREE_TOKEN_ENV = "SMLAUNCH_K8S_TREE_TOKEN"
TOKEN_HEADER = "X-Smlaunch-Tree-Token"
CHECKPOINTS_ENV = "SMLAUNCH_K8S_CHECKPOINTS"
CHECKPOINT_SECONDS = float(os.environ.get("SMLAUNCH_K8S_CHECKPOINT_SECONDS", "10"))
BASE = Path(os.environ.get("SAGEMAKER_BASE_DIR", "/opt/ml"))
FUSE_ENV = "SMLAUNCH_K8S_FUSE"
NO_FUSE = (
    "this job's pods may not use FUSE: KubernetesSession(fuse=True) runs them privileged, "
    "fuse='<resource>' asks a /dev/fuse device plugin"
)
POLL_SECONDS = 1.0
SIGNAL_WAIT_SECONDS = 20.0
"""How long the agent holds a host's poll for signals open when it has none for it."""
"""How often a channel's failure is looked for while the runtime runs."""
DATA_FAILURE_PREFIX = "ClientError: Data download failed: "
TRIES = 5
TIMEOUT_SECONDS = 300


def _request(url: str, data: bytes | None = None) -> bytes:
    """GET (or PUT ``data``), retried: the agent may be busy writing another host's tree."""
    for attempt in range(TRIES):
        try:
            request = urllib.request.Request(url, data=data, method="PUT" if data is not None else "GET")
            request.add_header(TOKEN_HEADER, os.environ.get(TREE_TOKEN_ENV, ""))
            with urllib.request.urlopen(request, timeout=TIMEOUT_SECONDS) as response:
                return bytes(response.read())
        except OSError as error:
            if attempt == TRIES - 1:
                raise
            print(f"[smlaunch] {url.rsplit('/', 1)[-1]}: {error}; retrying", flush=True)
            time.sleep(1 + attempt)
    raise AssertionError("unreachable")


def fetch_tree(url: str, base: Path) -> None:
    """Extract the host's tree (``<url>/tree.tar``) into ``base`` (empty: an ``emptyDir``)."""
    with tempfile.TemporaryDirectory() as scratch:
        archive = Path(scratch) / "tree.tar"
        archive.write_bytes(_request(f"{url}/tree.tar"))
        staged = Path(scratch) / "tree"
        safe_extract(archive, staged)
        for entry in staged.iterdir():
            shutil.move(entry, base / entry.name)  # /tmp and the emptyDir: two filesystems


def send_results(url: str, base: Path, names: tuple[str, ...] = ("model", "output")) -> None:
    """``names`` (``model/`` and ``output/``, the checkpoint directory) of ``base`` to
    ``<url>/result.tar`` (links kept as links)."""
    with tempfile.TemporaryDirectory() as scratch:
        archive = Path(scratch) / "result.tar"
        with tarfile.open(archive, "w") as tar:
            for name in names:
                if (base / name).is_dir():
                    tar.add(base / name, arcname=name)
        _request(f"{url}/result.tar", archive.read_bytes())


def listen_for_signals(url: str, deliver: Callable[[int], None]) -> None:
    """Forever (a daemon thread): each signal the agent has for this host (``<url>/signal``, see
    :mod:`.trees`) handed to ``deliver``. A failed poll is retried a second later, quietly: while
    this host does not poll, the agent signals it by deleting its pod."""
    while True:
        try:
            request = urllib.request.Request(f"{url}/signal")
            request.add_header(TOKEN_HEADER, os.environ.get(TREE_TOKEN_ENV, ""))
            with urllib.request.urlopen(request, timeout=SIGNAL_WAIT_SECONDS + 10) as response:
                body = response.read().strip()
        except OSError:
            time.sleep(1)
            continue
        if body.isdigit():
            deliver(int(body))


def signature(directory: Path) -> list[tuple[str, int, int]]:
    """What changes when a file under ``directory`` is written, added or removed (path, size,
    modification time): the checkpoints go back only when it changed since they last went."""
    found = []
    for path in sorted(directory.rglob("*")) if directory.is_dir() else []:
        with contextlib.suppress(OSError):  # removed while listed: absent from the signature
            info = path.lstat()
            found.append((str(path.relative_to(directory)), info.st_size, info.st_mtime_ns))
    return found


def _current_host(base: Path) -> str:
    config = json.loads((base / "input" / "config" / "resourceconfig.json").read_text())
    return str(config["current_host"])


def deliver_channels(base: Path) -> Any | None:
    """This host's handed-off channels delivered (a ``JobData`` to close at the end), or None when
    the agent handed none off. Imported here, not above: most jobs have none."""
    from smlaunch.sdk.backends.emulated import handoff

    if not (base / handoff.PLAN_FILE).is_file():
        return None
    import boto3

    from smlaunch import contract
    from smlaunch.contract.transfer.engine import TransferEngine
    from smlaunch.sdk.backends.emulated.data import JobData

    host = _current_host(base)
    engine = TransferEngine(client_factory=lambda: boto3.client("s3"), progress=False)
    data = JobData.for_host(
        int(host.rsplit("-", 1)[1]) - 1,
        contract.Paths(base),
        base / ".smlaunch" / "cache",  # the emptyDir: where File data would be too
        engine,
        lambda line: print(f"[smlaunch] {line}", flush=True),
        fuse_unavailable=None if os.environ.get(FUSE_ENV) == "1" else NO_FUSE,
    )
    data.deliver_handed_off()
    return data


def write_data_failure(base: Path, error: str, when: float) -> None:
    """``output/failure`` and ``failure.json`` for a channel that failed on this host: its cause is
    the job's (the runtime's own "stopped by SIGTERM" report, written after, is replaced)."""
    output = base / "output"
    output.mkdir(parents=True, exist_ok=True)
    host = _current_host(base)
    # Named in the reason, so that the agent takes it as it is (else it says "algo-N exited ...").
    reason = f"{DATA_FAILURE_PREFIX}{error}" + ("" if host in error else f" (on {host})")
    details: dict[str, object] = {"host": host, "rank": None, "label": None, "exit_code": 1}
    details.update({"time": when, "reason": reason, "kind": "failed"})
    for name in ("failure", "failure.json"):  # never through a link a rank left in their place
        (output / name).unlink(missing_ok=True)
    (output / "failure").write_text(reason[:1024])
    (output / "failure.json").write_text(json.dumps(details, indent=2) + "\n")


def main() -> int:
    url = os.environ.get(TREE_ENV)
    if not url:
        print(f"[smlaunch] {TREE_ENV} is not set: this pod was not started by a job's agent", flush=True)
        return 2
    # Every signal, in-band too (raised here), goes through this handler in the main thread: to
    # the runtime once it runs; before, it is held, and the runtime never starts.
    started: list[subprocess.Popen[bytes]] = []
    early: list[int] = []

    def forward(signum: int, frame: FrameType | None) -> None:
        if started:
            started[0].send_signal(signum)
        else:
            early.append(signum)

    signal.signal(signal.SIGTERM, forward)
    signal.signal(signal.SIGINT, forward)
    raise_here = functools.partial(os.kill, os.getpid())
    threading.Thread(target=listen_for_signals, args=(url, raise_here), daemon=True).start()
    fetch_tree(url, BASE)
    data = deliver_channels(BASE)
    if early:
        print(f"[smlaunch] stopped by {signal.Signals(early[0]).name} before the runtime started", flush=True)
        if data is not None:
            data.close()
        return 128 + early[0]
    runtime = subprocess.Popen([sys.executable, "-m", "smlaunch.runtime"])
    started.append(runtime)
    if early:  # it came while the runtime started
        runtime.send_signal(early[0])
    checkpoints = os.environ.get(CHECKPOINTS_ENV)
    sent = signature(BASE / checkpoints) if checkpoints else None  # as fetched: the agent has it
    next_send = time.monotonic() + CHECKPOINT_SECONDS
    failed: tuple[str, float] | None = None
    while True:
        try:
            code = runtime.wait(timeout=POLL_SECONDS if checkpoints or data is not None else None)
            break
        except subprocess.TimeoutExpired:
            if data is not None and data.errors and failed is None:
                failed = (data.errors[0], time.time())
                runtime.send_signal(signal.SIGTERM)  # the script would wait for data never coming
            if not checkpoints or time.monotonic() < next_send:
                continue
            next_send = time.monotonic() + CHECKPOINT_SECONDS
            now = signature(BASE / str(checkpoints))
            if now == sent:
                continue
            try:
                send_results(url, BASE, (str(checkpoints),))
                sent = now
            except OSError as error:
                print(f"[smlaunch] checkpoints not handed back to the agent: {error}", flush=True)
    code = 128 - code if code < 0 else code
    if data is not None:
        data.close()
        if failed is None and data.errors and code != 0:  # it failed as the script did: the cause
            failed = (data.errors[0], time.time())
    if failed is not None:
        write_data_failure(BASE, *failed)
        code = code or 1
    names = ("model", "output", checkpoints) if checkpoints else ("model", "output")
    try:
        send_results(url, BASE, names)
    except OSError as error:
        print(f"[smlaunch] model and output not handed back to the agent: {error}", flush=True)
        return code or 1
    return code


if __name__ == "__main__":
    sys.exit(main())
