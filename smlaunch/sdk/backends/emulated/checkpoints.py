"""Checkpoints, intermediate and TensorBoard output synced for backends that run hosts on this machine.

Checkpoints (``CheckpointConfig``, SDK ``checkpoint_s3_uri`` / ``checkpoint_local_path``), as the
SageMaker platform handles them:

- **Restore**: before the script starts, everything under ``S3Uri`` is downloaded into *every*
  host's checkpoint directory (``LocalPath``, default ``/opt/ml/checkpoints``: in a process host,
  that path in its tree, which ``checkpointconfig.json`` names; in a container, the path itself),
  so a restarted job (spot, retry) resumes from what it saved.
- **Sync while training**: a background thread scans every host's checkpoint directory every
  ``interval`` seconds and uploads the files created or modified on that host since the restore
  (or since their last upload); a restored file a host never touched is never sent back, so it
  cannot overwrite what another host saved. Identical content is still not re-sent (the transfer
  engine compares sizes and hashes). Debounced: a file is uploaded only once it has
  not been modified for ``settle`` seconds, so a checkpoint being written is not sent half-written.
  At the end of each attempt (success, failure, stop or interruption) a final sync sends everything,
  settled or not.
- **Deletions**: "If a checkpoint is deleted in the SageMaker container, it will also be deleted
  in the S3 folder" (AWS, *Checkpoints in Amazon SageMaker*). A file this sync knew on a host
  (restored there, or uploaded from there) and that is gone from that host at the next tick is
  deleted from ``S3Uri``; so a script that prunes old checkpoints finds only the kept ones after a
  restart. Objects the job never saw on that host (added to ``S3Uri`` after the start, or written
  by another host only) are never deleted by it. Intermediate output is upload-only.
- **Several hosts** sync to the same ``S3Uri``, as on SageMaker: if two hosts write the same file
  name, the later upload wins. Save checkpoints from one host (or use host-specific names).

What each tick sends of a host's directory is :mod:`smlaunch.contract.artifact_tree`'s rule: regular files,
and links to them inside the directory (as SageMaker uploads regular files); links out of it,
dangling links, loops, FIFOs, sockets and devices are skipped, each named once in the job log. A
file that stops being a regular file counts as deleted.

Managed spot (attempts, interruptions) is :mod:`smlaunch.sdk.backends.emulated.spot`.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Collection, Mapping
from pathlib import Path

from smlaunch import contract
from smlaunch.contract import artifact_tree
from smlaunch.contract.artifact_tree import Skipped
from smlaunch.contract.transfer.engine import TransferEngine, TransferSummary
from smlaunch.sdk.backends.base import output_prefix
from smlaunch.sdk.backends.emulated import layout
from smlaunch.sdk.request.spec import TrainingJobSpec

Log = Callable[[str], None]


class DirectorySync:
    """Restore, then keep syncing, one directory per host with ``uri``: the hosts' checkpoint
    directories, and (upload only) their ``output/intermediate`` and TensorBoard directories."""

    def __init__(
        self,
        engine: TransferEngine,
        uri: str,
        host_dirs: Mapping[str, Path],
        log: Log,
        interval: float = 0.5,
        settle: float = 0.5,
        deletions: bool = False,
        what: str = "directory",
        seen_at: str | None = None,
    ) -> None:
        self.engine = engine
        self.what = what
        self.seen_at = seen_at
        self.uri = uri.rstrip("/") + "/"
        self.host_dirs = dict(host_dirs)
        self.log = log
        self.interval = interval
        self.settle = settle
        self.deletions = deletions
        self.uploaded: list[str] = []
        self.deleted: list[str] = []
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._baseline: dict[tuple[str, str], tuple[int, int]] = {}
        self._reported: set[tuple[str, Skipped]] = set()

    def restore(self) -> int:
        """Download every checkpoint under the URI into every host's directory; return the count."""
        total = 0
        for host, directory in self.host_dirs.items():
            directory.mkdir(parents=True, exist_ok=True)
            summary = self.engine.download_prefix(self.uri, directory)
            count = len(summary.transferred) + len(summary.skipped)
            total = max(total, count)
            if count:
                self.log(f"Restored {count} checkpoint file(s) from {self.uri} into {host}")
            self._remember(host, directory)
        return total

    def _remember(self, host: str, directory: Path) -> None:
        """Record what every file of ``directory`` looks like now: only later changes are sent."""
        for item in artifact_tree.walk(directory, self.seen_at).files:
            with contextlib.suppress(OSError):
                st = item.path.stat()
                self._baseline[(host, item.name)] = (st.st_size, st.st_mtime_ns)

    def _report(self, host: str, skipped: list[Skipped]) -> None:
        """Name in the log each entry skipped on ``host`` not named before, up to
        :data:`smlaunch.contract.artifact_tree.MAX_REPORTED` for this sync (every tick walks again)."""
        new = [entry for entry in skipped if (host, entry) not in self._reported]
        room = artifact_tree.MAX_REPORTED - len(self._reported)
        if not new or room <= 0:
            return
        self._reported.update((host, entry) for entry in new[:room])
        for line in artifact_tree.skip_report(new, f"{self.what} of {host}", limit=room):
            self.log(line)

    def sync(self, final: bool = False) -> TransferSummary:
        """Upload the files of every host created or modified since the restore (or their last
        upload); only those unmodified for ``settle`` seconds unless ``final``. With
        ``deletions``, first delete the known files a host no longer has."""
        total = TransferSummary()
        with self._lock:
            for host, directory in self.host_dirs.items():
                if not directory.is_dir():
                    continue
                listing = artifact_tree.walk(directory, self.seen_at)
                self._report(host, listing.skipped)
                files = {item.name: item.path for item in listing.files}
                if self.deletions:
                    self._delete_gone(host, files.keys())
                cutoff = time.time() - self.settle
                seen: dict[str, tuple[int, int]] = {}

                def wanted(
                    rel: str,
                    host: str = host,
                    files: dict[str, Path] = files,
                    cutoff: float = cutoff,
                    seen: dict[str, tuple[int, int]] = seen,
                ) -> bool:
                    try:
                        st = files[rel].stat()
                    except OSError:
                        return False  # deleted since the listing
                    print_ = (st.st_size, st.st_mtime_ns)
                    if self._baseline.get((host, rel)) == print_:
                        return False  # unchanged here (e.g. restored and never touched)
                    if not final and st.st_mtime > cutoff:
                        return False  # still being written: next tick
                    seen[rel] = print_
                    return True

                total.merge(
                    self.engine.upload_dir(directory, self.uri, include=wanted, files=list(files.items()))
                )
                for rel, print_ in seen.items():
                    self._baseline[(host, rel)] = print_
        self.uploaded += total.transferred
        return total

    def _delete_gone(self, host: str, present: Collection[str]) -> None:
        gone = [rel for (known_host, rel) in self._baseline if known_host == host and rel not in present]
        if not gone:
            return
        self.deleted += self.engine.delete(self.uri, gone)
        for rel in gone:
            del self._baseline[(host, rel)]
        self.log(f"Sync: deleted {len(gone)} file(s) from {self.uri} (deleted on {host})")

    def start(self) -> None:
        """Start the background sync thread (daemon; :meth:`stop` ends it)."""
        self._stop.clear()
        self._thread = threading.Thread(target=self._loop, name=f"sync-{self.uri}", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                summary = self.sync()
                if summary.transferred:
                    self.log(f"Sync: uploaded {len(summary.transferred)} file(s) to {self.uri}")
            except Exception as exc:  # keep training; report, retry at the next tick
                self.errors.append(f"{type(exc).__name__}: {exc}")
                self.log(f"WARNING sync to {self.uri} failed: {type(exc).__name__}: {exc}")

    def stop(self) -> TransferSummary:
        """Stop the thread and send everything left (the final sync). Safe to call twice."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=60)
            self._thread = None
        summary = self.sync(final=True)
        if summary.transferred:
            self.log(
                f"Final sync to {self.uri}: {len(summary.transferred)} uploaded, "
                f"{len(summary.skipped)} unchanged"
            )
        return summary


def host_syncs(
    spec: TrainingJobSpec, hosts: Mapping[str, contract.Paths], engine: TransferEngine, log: Log
) -> list[DirectorySync]:
    """The syncs one attempt runs: checkpoints (restored now), intermediate and TensorBoard output.

    Intermediate output (``/opt/ml/output/intermediate``) goes to
    ``<output_path>/<job>/output/intermediate/`` while the job runs, as the platform does.

    TensorBoard output (``TensorBoardOutputConfig``): every host's ``LocalPath`` (see
    :func:`smlaunch.sdk.backends.emulated.layout.tensorboard_dir`) is uploaded to ``S3OutputPath``
    exactly as given (SageMaker appends no job name: see :mod:`smlaunch.sdk.debugger`), upload only,
    all hosts into the one prefix (TensorBoard writers put host and pid in their file names). No
    debounce: event files are append-only and TensorBoard reads a partly written last record as
    not yet written, so each tick sends what the hosts have flushed so far.
    """
    syncs: list[DirectorySync] = []
    if spec.CheckpointConfig is not None:
        directories = {name: layout.checkpoint_dir(spec, p) for name, p in hosts.items()}
        checkpoints = DirectorySync(
            engine,
            spec.CheckpointConfig.S3Uri,
            {name: d for name, d in directories.items() if d is not None},
            log,
            deletions=True,
            what="checkpoint directory",
            seen_at=layout.checkpoint_local_path(spec),
        )
        checkpoints.restore()
        syncs.append(checkpoints)
    intermediate = output_prefix(spec.OutputDataConfig.S3OutputPath, spec.TrainingJobName) + "/intermediate"
    syncs.append(
        DirectorySync(
            engine,
            intermediate,
            {name: p.output_intermediate_dir for name, p in hosts.items()},
            log,
            what="intermediate output directory",
            seen_at=str(contract.Paths().output_intermediate_dir),
        )
    )
    if spec.TensorBoardOutputConfig is not None:
        tensorboard = {name: layout.tensorboard_dir(spec, p) for name, p in hosts.items()}
        syncs.append(
            DirectorySync(
                engine,
                spec.TensorBoardOutputConfig.S3OutputPath,
                {name: d for name, d in tensorboard.items() if d is not None},
                log,
                settle=0.0,
                what="TensorBoard directory",
                seen_at=layout.tensorboard_local_path(spec),
            )
        )
    return syncs
