"""Channel delivery for backends that run hosts on this machine: File, FastFile and Pipe input modes.

Used by the local agent (:mod:`smlaunch.sdk.backends.emulated.agent`) before it starts the host runtimes.
Which objects a host gets (ShardedByS3Key, ManifestFile expansion, Pipe order) is decided by
:mod:`smlaunch.contract.channels`; bytes move through
:class:`smlaunch.contract.transfer.engine.TransferEngine` (parallel, verified).
``inputdataconfig.json`` records the mode actually delivered (``File``, ``FastFile`` or ``Pipe``),
unlike SageMaker's local mode, which always writes ``File``. One concept (getting each
host its channels), kept whole past 500 lines because the three modes share staging, sharding and
the failure path; what differs per mode lives in :mod:`smlaunch.contract.channels` and
:mod:`smlaunch.sdk.backends.emulated.fastfile`.

What each mode guarantees to the training script
------------------------------------------------
- **File**: every object of the host's share is present under ``input/data/<channel>/`` at its
  relative path before the script starts. ``file://`` data is not copied: each file is a symlink
  into the original (see :mod:`smlaunch.sdk.backends.emulated.layout`); ``s3://`` data is downloaded once
  per job into the job's cache and linked into every host's tree.
- **FastFile** (``s3://`` sources): as SageMaker mounts it, a read-only FUSE file system at
  ``input/data/<channel>/`` on each host (:mod:`smlaunch.sdk.backends.emulated.fastfile`, one server process
  per host and
  channel, mounted before the host starts): listing it shows the host's whole share at once
  (ShardedByS3Key included) with every size; an object's bytes are fetched on its first read (once
  per job: every host's mount shares the job's cache), so the script starts before the data arrive.
  Where FUSE cannot be used (no ``/dev/fuse``, no ``fuse3``, no ``mfusepy``, or the mount fails),
  the channel is delivered with File semantics (every object present before the script starts) and
  the job log says why. A listing is never partial. ``file://`` sources are symlinked, as in File mode.
- **Pipe**: for each channel a FIFO ``input/data/<channel>_<epoch>`` per epoch, starting at
  ``<channel>_0``, streaming the host's share object after object (decompressed when
  ``CompressionType="Gzip"``, RecordIO-framed when ``RecordWrapperType="RecordIO"``; order per
  :func:`smlaunch.contract.channels.epoch_order`). Gzip in File or FastFile mode is refused before the job
  starts (``Backend.check``), as SageMaker refuses it. When the writer
  has sent the last byte of epoch ``N`` it first creates ``<channel>_<N+1>``, then closes epoch ``N``
  (the reader sees EOF) and removes its FIFO: so when a reader sees EOF, the next epoch's FIFO exists.
  A reader that closes a FIFO early ends that epoch. Epochs continue until the job ends.

Hosts on another machine (``hand_off=True``, the Kubernetes executor's pods): the agent decides
each FastFile (``s3://``) and Pipe channel's shares here as always, then writes them into each
host's tree (:mod:`smlaunch.sdk.backends.emulated.handoff`) instead of delivering them; the host
delivers its own with :meth:`JobData.deliver_handed_off`, the same mounts and feeders as above.
"""

from __future__ import annotations

import errno
import json
import os
import re
import select
import stat
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from smlaunch import contract
from smlaunch.contract import channels as rules
from smlaunch.contract.transfer.engine import ObjectInfo, TransferEngine
from smlaunch.contract.transfer.uris import is_s3, local_path, split_s3_uri
from smlaunch.sdk.backends.emulated import fastfile, handoff, layout
from smlaunch.sdk.request.spec import Channel, TrainingJobSpec

PIPE_CHUNK = 1 << 20
_POLL = 0.05
MOUNT_TIMEOUT_SECONDS = 30.0
"""Bound on a FastFile server's start (import, S3-free tree, ``fusermount3``) before falling back."""
UNMOUNT_TIMEOUT_SECONDS = 10.0

Log = Callable[[str], None]


def channel_mode(spec: TrainingJobSpec, channel: Channel) -> str:
    return channel.InputMode or spec.AlgorithmSpecification.TrainingInputMode


def list_channel(engine: TransferEngine, channel: Channel) -> list[ObjectInfo]:
    """Every object of a channel, key order: an S3Prefix listing, or a ManifestFile's expansion."""
    source = channel.DataSource.S3DataSource
    if source is None:
        raise rules.ChannelError(f"channel {channel.ChannelName!r} has no S3DataSource")
    if source.S3DataType == "S3Prefix":
        return engine.list(source.S3Uri)
    if source.S3DataType != "ManifestFile":
        raise rules.ChannelError(
            f"channel {channel.ChannelName!r}: S3DataType {source.S3DataType!r} is not supported locally"
        )
    return expand_manifest(engine, read_manifest(engine, source.S3Uri), source.S3Uri)


def read_manifest(engine: TransferEngine, uri: str) -> list[rules.ManifestEntry]:
    """The entries of the manifest at ``uri``. :class:`~smlaunch.contract.channels.ChannelError` when it is
    not a manifest (not UTF-8, not JSON, wrong shape); errors reading it (S3, OS) propagate."""
    try:
        text = _read_text(engine, uri)
    except UnicodeDecodeError as exc:
        raise rules.ChannelError(f"manifest {uri} is not UTF-8 text: {exc}") from exc
    return rules.parse_manifest(text, uri)


def expand_manifest(engine: TransferEngine, entries: list[rules.ManifestEntry], uri: str) -> list[ObjectInfo]:
    """The objects a manifest names, key order, with their sizes (one listing per prefix).

    :class:`~smlaunch.contract.channels.ChannelError` naming the missing objects when any does not exist.
    """
    prefixes = {e.uri[: len(e.uri) - len(e.rel)] for e in entries}
    listed: dict[str, ObjectInfo] = {}
    for prefix in prefixes:
        for info in engine.list(prefix):
            listed[info.uri] = info
    missing = [entry.uri for entry in entries if entry.uri not in listed]
    if missing:
        message = f"manifest {uri} names {missing[0]}, which does not exist"
        if len(missing) > 1:
            shown = ", ".join(missing[1:4]) + (", ..." if len(missing) > 4 else "")
            message += f" (and {len(missing) - 1} more missing: {shown})"
        raise rules.ChannelError(message)
    objects = [ObjectInfo(e.uri, e.rel, listed[e.uri].size, listed[e.uri].etag) for e in entries]
    return sorted(objects, key=lambda o: o.rel)


def _read_text(engine: TransferEngine, uri: str) -> str:
    if is_s3(uri):
        bucket, key = split_s3_uri(uri)
        body: bytes = engine.client.get_object(Bucket=bucket, Key=key)["Body"].read()
        return body.decode("utf-8")
    return local_path(uri).read_text(encoding="utf-8")


def _atomic_symlink(target: Path, link: Path) -> None:
    link.parent.mkdir(parents=True, exist_ok=True)
    tmp = link.with_name(f".{link.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    tmp.unlink(missing_ok=True)
    tmp.symlink_to(target)
    os.replace(tmp, link)


class JobData:
    """Stages every channel of one job into every host's tree and runs the background feeders.

    ``hosts``: ``(host index, host's Paths)`` in host order. ``cache_dir``: where ``s3://`` objects
    are downloaded once per job. ``stage()`` returns when each host can start (File data present,
    FastFile listing written, first Pipe FIFOs created); ``close()`` stops the feeders.
    ``hand_off``: FastFile (``s3://``) and Pipe channels are left to the hosts (see the module
    docstring). ``fuse_unavailable``: why FUSE must not be used here, when the caller knows better
    than :func:`~smlaunch.sdk.backends.emulated.fastfile.unavailable` (a pod without ``/dev/fuse``
    access asked for).
    """

    def __init__(
        self,
        spec: TrainingJobSpec | None,
        hosts: Sequence[tuple[int, contract.Paths]],
        cache_dir: Path,
        engine: TransferEngine,
        log: Log,
        hand_off: bool = False,
        fuse_unavailable: str | None = None,
    ) -> None:
        self.spec = spec
        self.hosts = list(hosts)
        self.cache_dir = cache_dir
        self.engine = engine
        self.log = log
        self.originals: list[Path] = []
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._mounts: list[FastFileMount] = []
        self._config_dir = cache_dir / ".smlaunch-fastfile"
        self.hand_off = hand_off
        self.fuse_unavailable = fuse_unavailable
        self._plans: dict[int, list[handoff.HandedOffChannel]] = {index: [] for index, _ in self.hosts}

    @classmethod
    def for_host(
        cls,
        index: int,
        paths: contract.Paths,
        cache_dir: Path,
        engine: TransferEngine,
        log: Log,
        fuse_unavailable: str | None = None,
    ) -> JobData:
        """On a host whose agent handed channels off: delivers this host's (see
        :meth:`deliver_handed_off`), never lists or shares anything itself."""
        return cls(None, [(index, paths)], cache_dir, engine, log, fuse_unavailable=fuse_unavailable)

    def deliver_handed_off(self) -> int:
        """Deliver the channels the agent left to this host (its tree's plan), as :meth:`stage`
        would have; the number of channels."""
        [(index, paths)] = self.hosts
        plan = handoff.read_plan(paths.base)
        for item in plan.channels:
            objects = item.infos()
            name = item.channel.ChannelName
            self.log(f"Channel {name!r}: {len(objects)} object(s) for this host, {item.mode} mode")
            if item.mode == "Pipe":
                self._stage_pipe(item.channel, {index: objects})
            else:
                self._stage_fastfile(item.channel, objects, {index: objects})
        return len(plan.channels)

    # -- staging

    def stage(self) -> None:
        assert self.spec is not None, "a host's JobData only delivers what was handed off"
        for channel in self.spec.InputDataConfig or []:
            mode = channel_mode(self.spec, channel)
            source = channel.DataSource.S3DataSource
            assert source is not None
            objects = list_channel(self.engine, channel)
            for obj in objects:  # each object lands at input/data/<channel>/<rel>: never above it
                try:
                    contract.child_path(self._cache_root(channel), obj.rel, "object")
                except contract.PathEscapeError:
                    raise rules.ChannelError(
                        f"channel {channel.ChannelName!r}: object {obj.uri} would be written at "
                        f"{obj.rel!r}, outside the channel's directory; rename or remove it"
                    ) from None
            shares = {
                index: rules.select_for_host(
                    objects, source.S3DataDistributionType, index, len(self.hosts), key=lambda o: o.rel
                )
                for index, _ in self.hosts
            }
            summary = ", ".join(f"{contract.host_name(i)}: {len(s)}" for i, s in shares.items())
            self.log(
                f"Channel {channel.ChannelName!r}: {len(objects)} object(s), {mode} mode, "
                f"{source.S3DataDistributionType} ({summary})"
            )
            remote = is_s3(source.S3Uri) or source.S3DataType == "ManifestFile"
            if self.hand_off and (mode == "Pipe" or (mode == "FastFile" and remote)):
                for index, _ in self.hosts:
                    self._plans[index].append(handoff.handed_off(channel, mode, shares[index]))
            elif mode == "Pipe":
                self._stage_pipe(channel, shares)
            elif is_s3(source.S3Uri) or source.S3DataType == "ManifestFile":
                if mode == "FastFile":
                    self._stage_fastfile(channel, objects, shares)
                else:
                    self._stage_downloaded(channel, objects, shares)
            else:
                self._stage_linked(channel, shares)
        for index, paths in self.hosts:
            if self._plans[index]:
                handoff.write_plan(paths.base, handoff.HandOffPlan(channels=tuple(self._plans[index])))

    def _stage_linked(self, channel: Channel, shares: dict[int, list[ObjectInfo]]) -> None:
        """file:// File/FastFile: symlink views of the original files (nothing copied)."""
        source = channel.DataSource.S3DataSource
        assert source is not None
        root = local_path(source.S3Uri)
        sharded = source.S3DataDistributionType == rules.SHARDED_BY_S3_KEY and not root.is_file()
        for index, paths in self.hosts:
            subset = [o.rel for o in shares[index]] if sharded else None
            self.originals += layout.link_view(root, paths.channel_dir(channel.ChannelName), subset)

    def _cache_root(self, channel: Channel) -> Path:
        return contract.child_path(self.cache_dir, channel.ChannelName, "channel name", single=True)

    def _stage_downloaded(
        self, channel: Channel, objects: list[ObjectInfo], shares: dict[int, list[ObjectInfo]]
    ) -> None:
        """s3:// (or manifest) File: download every object once, then link each host's share."""
        needed = {o.uri: o for share in shares.values() for o in share}
        cache = self._cache_root(channel)
        label = f"Channel {channel.ChannelName!r}: download"
        summary = self.engine.download_objects(
            sorted(needed.values(), key=lambda o: o.rel), cache, label=label
        )
        self.log(summary.line(label))
        for index, paths in self.hosts:
            dest = paths.channel_dir(channel.ChannelName)
            dest.mkdir(parents=True, exist_ok=True)
            for obj in shares[index]:
                _atomic_symlink(cache / obj.rel, dest / obj.rel)

    def _stage_fastfile(
        self, channel: Channel, objects: list[ObjectInfo], shares: dict[int, list[ObjectInfo]]
    ) -> None:
        """s3:// FastFile: one FUSE mount per host (see the module docstring), else File semantics."""
        name = channel.ChannelName
        reason = self.fuse_unavailable or fastfile.unavailable()
        mounts: list[FastFileMount] = []
        if reason is None:
            meta = getattr(self.engine.client, "meta", None)
            s3 = {
                "s3_endpoint_url": getattr(meta, "endpoint_url", None),
                "s3_region_name": getattr(meta, "region_name", None),
            }

            def on_error(line: str) -> None:
                self._fail(f"FastFile channel {name!r}: {line}")

            for index, paths in self.hosts:  # every server starts, then all are awaited
                mounts.append(
                    FastFileMount(
                        paths.channel_dir(name),
                        self._cache_root(channel),
                        shares[index],
                        s3,
                        self._config_dir / f"{name}-{index}.json",
                        on_error,
                    )
                )
            problems = [problem for mount in mounts if (problem := mount.wait_mounted()) is not None]
            if problems:
                reason = problems[0]
                for mount in mounts:
                    mount.close()
                mounts = []
        if reason is not None:
            self.log(
                f"Channel {name!r}: FastFile cannot be mounted here ({reason}); delivering it with "
                "File semantics instead: every object is downloaded before the script starts"
            )
            self._stage_downloaded(channel, objects, shares)
            return
        self._mounts += mounts
        self.log(
            f"Channel {name!r}: FastFile mounted on {len(mounts)} host(s) (FUSE; objects are fetched "
            "on first read)"
        )

    def _stage_pipe(self, channel: Channel, shares: dict[int, list[ObjectInfo]]) -> None:
        wrap = channel.RecordWrapperType == "RecordIO"
        seed = channel.ShuffleConfig.Seed if channel.ShuffleConfig is not None else None
        for index, paths in self.hosts:
            pipe = PipeFeeder(
                self.engine,
                paths,
                channel.ChannelName,
                shares[index],
                wrap,
                seed,
                self._stop,
                gzip=channel.CompressionType == "Gzip",
            )
            pipe.create(0)

            def feed(pipe: PipeFeeder = pipe, host: str = contract.host_name(index)) -> None:
                try:
                    pipe.run()
                except Exception as exc:
                    self._fail(f"Pipe channel {pipe.channel!r} on {host}: {type(exc).__name__}: {exc}")

            self._start(feed, f"pipe-{channel.ChannelName}-{index}")

    # -- background threads

    def _start(self, target: Callable[[], None], name: str) -> None:
        thread = threading.Thread(target=target, name=name, daemon=True)
        thread.start()
        self._threads.append(thread)

    def _fail(self, message: str) -> None:
        self.errors.append(message)
        self.log(f"ERROR {message}")

    def close(self, timeout: float = 10.0) -> None:
        """Stop the Pipe writers and unmount the FastFile channels. Idempotent."""
        self._stop.set()
        deadline = time.monotonic() + timeout
        for thread in self._threads:
            thread.join(timeout=max(0.0, deadline - time.monotonic()))
        for mount in self._mounts:
            mount.close()
        self._mounts = []


def _write_atomic(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write(text)
    os.replace(tmp, path)


def _is_mount_point(path: Path) -> bool:
    """Whether ``path`` is a mount point in this process's mount namespace, even a dead FUSE mount
    (whose ``stat`` fails with ENOTCONN, so ``os.path.ismount`` cannot tell)."""
    target = os.path.realpath(path)
    try:
        with open("/proc/self/mountinfo", encoding="utf-8") as mountinfo:
            for line in mountinfo:
                point = line.split()[4]
                if re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), point) == target:
                    return True
    except OSError:
        return os.path.ismount(path)
    return False


class FastFileMount:
    """One host's FastFile mount: a ``python -m smlaunch.sdk.backends.emulated.fastfile`` server for
    ``objects`` at
    ``mountpoint``. Lines the server prints starting with ``ERROR`` go to ``on_error``."""

    def __init__(
        self,
        mountpoint: Path,
        cache_dir: Path,
        objects: list[ObjectInfo],
        s3: dict[str, Any],
        config_file: Path,
        on_error: Log,
    ) -> None:
        self.mountpoint = mountpoint
        mountpoint.mkdir(parents=True, exist_ok=True)
        cache_dir.mkdir(parents=True, exist_ok=True)
        config = {
            "mountpoint": str(mountpoint),
            "cache_dir": str(cache_dir),
            "parent_pid": os.getpid(),
            "objects": [{"uri": o.uri, "rel": o.rel, "size": o.size, "etag": o.etag} for o in objects],
            **s3,
        }
        _write_atomic(config_file, json.dumps(config))
        self._output: list[str] = []
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "smlaunch.sdk.backends.emulated.fastfile", str(config_file)],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        self._reader = threading.Thread(
            target=self._read, args=(on_error,), daemon=True, name=f"fastfile-{mountpoint.name}"
        )
        self._reader.start()

    def _read(self, on_error: Log) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            line = line.rstrip("\n")
            self._output = [*self._output[-19:], line]
            if line.startswith("ERROR "):
                on_error(line.removeprefix("ERROR "))

    def wait_mounted(self, timeout: float = MOUNT_TIMEOUT_SECONDS) -> str | None:
        """None once the mount serves, else why it does not (the server exited, or took too long)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                self._reader.join(timeout=5)
                tail = " | ".join(line for line in self._output[-3:] if line.strip())
                return f"the FUSE server exited with code {self.proc.returncode}: {tail or 'no output'}"
            if os.path.ismount(self.mountpoint):
                return None
            time.sleep(_POLL)
        return f"the FUSE mount at {self.mountpoint} was not ready within {timeout:g} s"

    def close(self) -> None:
        """Unmount: SIGTERM to the server (libfuse unmounts), then a lazy unmount of anything left."""
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=UNMOUNT_TIMEOUT_SECONDS)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=UNMOUNT_TIMEOUT_SECONDS)
        if _is_mount_point(self.mountpoint):  # a server killed before it could unmount
            subprocess.run(
                [fastfile.FUSERMOUNT, "-u", "-z", str(self.mountpoint)],
                stdin=subprocess.DEVNULL,
                capture_output=True,
                timeout=UNMOUNT_TIMEOUT_SECONDS,
                check=False,
            )
        self._reader.join(timeout=UNMOUNT_TIMEOUT_SECONDS)


class PipeFeeder:
    """Feeds one channel's FIFOs on one host, epoch after epoch, until ``stop`` is set."""

    def __init__(
        self,
        engine: TransferEngine,
        paths: contract.Paths,
        channel: str,
        objects: list[ObjectInfo],
        recordio: bool,
        shuffle_seed: int | None,
        stop: threading.Event,
        gzip: bool = False,
    ) -> None:
        self.engine = engine
        self.gzip = gzip
        self.paths = paths
        self.channel = channel
        self.objects = objects
        self.recordio = recordio
        self.shuffle_seed = shuffle_seed
        self.stop = stop

    def create(self, epoch: int) -> Path:
        path = self.paths.pipe_path(self.channel, epoch)
        path.parent.mkdir(parents=True, exist_ok=True)
        if not (path.exists() and stat.S_ISFIFO(path.stat().st_mode)):
            os.mkfifo(path, 0o600)
        return path

    def run(self) -> None:
        epoch = 0
        while not self.stop.is_set():
            path = self.create(epoch)
            fd = self._open_writer(path)
            if fd is None:
                return  # stopped while nobody was reading
            try:
                self._write_epoch(fd, epoch)
                # The next FIFO exists before this one reports EOF (see the module docstring).
                self.create(epoch + 1)
            finally:
                os.close(fd)
                path.unlink(missing_ok=True)
            epoch += 1

    def _open_writer(self, path: Path) -> int | None:
        """Open the FIFO for writing once a reader has opened it; ``None`` if stopped first."""
        while not self.stop.is_set():
            try:
                return os.open(path, os.O_WRONLY | os.O_NONBLOCK)
            except OSError as exc:
                if exc.errno != errno.ENXIO:  # ENXIO: no reader yet
                    raise
            time.sleep(_POLL)
        return None

    def _chunks(self, info: ObjectInfo) -> Iterator[bytes]:
        if is_s3(info.uri):
            bucket, key = split_s3_uri(info.uri)
            body: Any = self.engine.client.get_object(Bucket=bucket, Key=key)["Body"]
            yield from body.iter_chunks(PIPE_CHUNK)
        else:
            with open(local_path(info.uri), "rb") as handle:
                while chunk := handle.read(PIPE_CHUNK):
                    yield chunk

    def _stored(self, info: ObjectInfo) -> Iterator[bytes]:
        """The object's bytes as stored; once read to the end, checked against the listed size."""
        sent = 0
        for chunk in self._chunks(info):
            sent += len(chunk)
            yield chunk
        if sent != info.size:
            raise rules.ChannelError(f"{info.uri}: streamed {sent} bytes, expected {info.size}")

    def _record(self, info: ObjectInfo) -> tuple[int | None, Iterator[bytes]]:
        """What the pipe carries for one object: its bytes (decompressed with Gzip) and their length
        where it is known before sending (always with RecordIO, whose header comes first).

        With RecordIO and Gzip, the object is decompressed into a spool file (in memory up to a few
        MiB) before it is sent; otherwise bytes stream straight through.
        """
        if not self.gzip:
            return info.size, self._stored(info)
        payload = rules.gunzip(self._stored(info), info.uri)
        if not self.recordio:
            return None, payload
        spool = tempfile.SpooledTemporaryFile(max_size=8 * PIPE_CHUNK)
        try:
            for chunk in payload:
                spool.write(chunk)
        except BaseException:
            spool.close()
            raise
        length = spool.tell()
        spool.seek(0)

        def replay() -> Iterator[bytes]:
            with spool:
                while chunk := spool.read(PIPE_CHUNK):
                    yield chunk

        return length, replay()

    def _write_epoch(self, fd: int, epoch: int) -> None:
        for info in rules.epoch_order(self.objects, epoch, self.shuffle_seed):
            length, payload = self._record(info)
            if self.recordio:
                assert length is not None  # _record knows the length whenever RecordIO frames it
                if not self._write(fd, rules.recordio_header(length)):
                    return
            for chunk in payload:
                if not self._write(fd, chunk):
                    return
            if self.recordio and length is not None and not self._write(fd, rules.recordio_padding(length)):
                return

    def _write(self, fd: int, data: bytes) -> bool:
        """Write all of ``data``; False when the reader went away or the job is stopping."""
        view = memoryview(data)
        while view:
            if self.stop.is_set():
                return False
            _, writable, _ = select.select([], [fd], [], _POLL)
            if not writable:
                continue
            try:
                view = view[os.write(fd, view) :]
            except BlockingIOError:
                continue
            except BrokenPipeError:
                return False
        return True
