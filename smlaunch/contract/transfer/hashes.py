"""Content hashes of local files, and the persistent cache that spares re-reading unchanged ones.

A file's digest is its SHA-256 and, below the multipart threshold, the MD5 that S3 reports as its
ETag (:class:`FileDigest`, :func:`digest_file`). :class:`HashCache` keeps digests per
``(path, size, mtime_ns, ctime_ns, device, inode)``, as git and rsync do, in memory and in a
per-user SQLite file (:func:`default_hash_cache_path`), so an unchanged tree is not re-read, not
even by a new process. A file changed less than 2 s before it was hashed is not cached, so a change
that leaves size and timestamps equal is still seen (git's "racy clean" rule). The transfer engine
(:mod:`.engine`) is its user; files are read through :func:`open_source`, which the engine uses
too, so a FIFO found where a file was listed never blocks.
"""

from __future__ import annotations

import hashlib
import logging
import os
import stat
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

from smlaunch import contract
from smlaunch.contract.progress import MiB
from smlaunch.contract.transfer.errors import TransferError

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class FileDigest:
    """Content hashes of one file: SHA-256, and for files below the multipart threshold the ETag S3
    computes for them (their MD5). Multipart-sized files get no ETag: an extra MD5 pass over
    gigabytes costs more than the one ``head_object`` that compares ``smlaunch-sha256`` instead."""

    size: int
    sha256: str
    etag: str | None


_SOURCE_FLAGS = os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC


def open_source(path: Path) -> BinaryIO:
    """``path`` opened for reading; it must be a regular file. Opened with ``O_NONBLOCK`` and checked
    with ``fstat``, so a FIFO (or a device) found where a file was listed raises
    :class:`TransferError` instead of blocking the transfer for ever."""
    fd = os.open(path, _SOURCE_FLAGS)
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise TransferError(f"{path} is not a regular file (it was replaced since it was listed?)")
    except BaseException:
        os.close(fd)
        raise
    return os.fdopen(fd, "rb")


def digest_file(path: Path, multipart_threshold: int) -> FileDigest:
    """Read ``path`` once; compute its SHA-256, and its MD5 ETag when it is uploaded in one part."""
    sha = hashlib.sha256()
    md5 = hashlib.md5(usedforsecurity=False) if path.stat().st_size < multipart_threshold else None
    size = 0
    with open_source(path) as handle:
        while data := handle.read(MiB):
            sha.update(data)
            if md5 is not None:
                md5.update(data)
            size += len(data)
    return FileDigest(size, sha.hexdigest(), md5.hexdigest() if md5 is not None else None)


# A file is trusted unchanged only while its size, mtime, ctime, device and inode are what they were
# when it was hashed. A file modified within this window before it was hashed could be modified again
# without its timestamps moving (coarse clocks, FAT's 2 s, NFS): its digest is not kept ("racy git").
RACY_WINDOW_NS = 2_000_000_000
DEFAULT_HASH_CACHE_ENTRIES = 200_000
HASH_CACHE_FILE_NAME = "transfer-hashes.sqlite"
_HASH_CACHE_SCHEMA = 1
_warned_stores: set[str] = set()


def default_hash_cache_path(environ: Mapping[str, str] | None = None) -> Path | None:
    """Where the persistent hash cache lives: ``$SMLAUNCH_HASH_CACHE`` (a file; empty or ``0`` turns
    the cache off), else ``$XDG_CACHE_HOME/smlaunch/transfer-hashes.sqlite``, else
    ``~/.cache/smlaunch/transfer-hashes.sqlite``; None when off or when there is no home directory."""
    env = os.environ if environ is None else environ
    chosen = env.get(contract.SMLAUNCH_HASH_CACHE)
    if chosen is not None:
        return None if chosen.strip() in ("", "0") else Path(chosen).expanduser()
    base = env.get("XDG_CACHE_HOME", "")
    if not os.path.isabs(base):  # the XDG spec: a relative value is ignored
        try:
            base = os.path.join(env.get("HOME") or Path.home(), ".cache")
        except RuntimeError:  # no HOME and no passwd entry
            return None
    return Path(base) / "smlaunch" / HASH_CACHE_FILE_NAME


@dataclass(frozen=True)
class _Hashes:
    sha256: str
    md5: str | None

    def digest(self, size: int, multipart_threshold: int) -> FileDigest | None:
        if size < multipart_threshold:
            return None if self.md5 is None else FileDigest(size, self.sha256, self.md5)
        return FileDigest(size, self.sha256, None)


def _stat_key(st: os.stat_result) -> str:
    """What proves a file unchanged, as git's index and rsync compare it."""
    return f"{st.st_size}:{st.st_mtime_ns}:{st.st_ctime_ns}:{st.st_dev}:{st.st_ino}"


class _HashStore:
    """The on-disk half of :class:`HashCache`: one SQLite file (WAL, so readers never wait and two
    submitters can write; a busy timeout for the rest) of ``path -> (stat key, SHA-256, MD5, last
    used)``. Paths and hashes only: never file contents. Any error disables it for this process's
    cache with one warning; a file that is not a database (or a corrupt one) is replaced."""

    def __init__(self, path: Path, max_entries: int) -> None:
        self.path = path
        self.max_entries = max_entries
        self._conn: Any = None
        self._opened = False

    def _open(self) -> Any:
        import sqlite3

        self.path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        if not self.path.exists():
            os.close(os.open(self.path, os.O_CREAT | os.O_WRONLY, 0o600))  # private from the start
        conn = sqlite3.connect(self.path, timeout=2.0, isolation_level=None, check_same_thread=False)
        try:
            # Switching to WAL does not wait for a busy lock as statements do: retry it for 2 s.
            for attempt in range(40):
                try:
                    if conn.execute("PRAGMA journal_mode").fetchone()[0] != "wal":
                        conn.execute("PRAGMA journal_mode=WAL")
                    break
                except sqlite3.OperationalError as exc:
                    if attempt == 39 or "locked" not in str(exc):
                        raise
                    time.sleep(0.05)
            conn.execute("PRAGMA synchronous=NORMAL")
            if conn.execute("PRAGMA user_version").fetchone()[0] != _HASH_CACHE_SCHEMA:
                conn.execute("BEGIN IMMEDIATE")
                if conn.execute("PRAGMA user_version").fetchone()[0] != _HASH_CACHE_SCHEMA:  # still
                    conn.execute("DROP TABLE IF EXISTS hashes")
                    conn.execute(
                        "CREATE TABLE hashes (path BLOB PRIMARY KEY, stat TEXT NOT NULL,"
                        " sha256 TEXT NOT NULL, md5 TEXT, used INTEGER NOT NULL) WITHOUT ROWID"
                    )
                    conn.execute("CREATE INDEX hashes_used ON hashes (used)")
                    conn.execute(f"PRAGMA user_version = {_HASH_CACHE_SCHEMA}")
                conn.execute("COMMIT")
        except BaseException:
            conn.close()
            raise
        return conn

    def _connection(self) -> Any:
        if not self._opened:
            self._opened = True
            try:
                self._conn = self._open()
            except Exception as exc:
                if not self._corrupt(exc):
                    self._disable(exc)
                    return None
                logger.warning("transfer hash cache %s is corrupt (%s): starting a new one", self.path, exc)
                self._remove()
                try:
                    self._conn = self._open()
                except Exception as again:
                    self._disable(again)
        return self._conn

    @staticmethod
    def _corrupt(exc: Exception) -> bool:
        import sqlite3

        name = getattr(exc, "sqlite_errorname", "")
        return isinstance(exc, sqlite3.DatabaseError) and (
            name in ("SQLITE_NOTADB", "SQLITE_CORRUPT")
            or str(exc) in ("file is not a database", "database disk image is malformed")
        )

    def _remove(self) -> None:
        for suffix in ("", "-wal", "-shm"):
            Path(f"{self.path}{suffix}").unlink(missing_ok=True)

    def _fail(self, exc: Exception) -> None:
        """Stop using the file after ``exc``; remove it if it is corrupt (the next process starts anew)."""
        self._disable(exc)
        if self._corrupt(exc):
            try:
                self._remove()
            except OSError:
                pass

    def _disable(self, exc: Exception) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            try:
                conn.close()
            except Exception:
                pass
        if str(self.path) not in _warned_stores:
            _warned_stores.add(str(self.path))
            logger.warning(
                "transfer hash cache %s is not usable (%s: %s); files will be hashed again "
                "(%s=0 turns the cache off)",
                self.path,
                type(exc).__name__,
                exc,
                contract.SMLAUNCH_HASH_CACHE,
            )

    def get(self, path: bytes) -> tuple[str, _Hashes, int] | None:
        """``(stat key, hashes, last used)`` stored for ``path``."""
        return self._select("path = ?", (path,)).get(path)

    def get_under(self, directory: bytes) -> dict[bytes, tuple[str, _Hashes, int]]:
        """Every entry below ``directory``, by path: one range scan of the primary key."""
        low = directory.rstrip(b"/") + b"/"
        return self._select("path >= ? AND path < ?", (low, low[:-1] + b"0"))  # "0" follows "/"

    def _select(self, where: str, args: tuple[bytes, ...]) -> dict[bytes, tuple[str, _Hashes, int]]:
        conn = self._connection()
        if conn is None:
            return {}
        try:
            query = f"SELECT path, stat, sha256, md5, used FROM hashes WHERE {where}"
            rows = conn.execute(query, args).fetchall()
        except Exception as exc:
            self._fail(exc)
            return {}
        return {row[0]: (row[1], _Hashes(row[2], row[3]), row[4]) for row in rows}

    def put(self, entries: dict[bytes, tuple[str, _Hashes]], touched: set[bytes]) -> None:
        """Store ``entries`` and mark ``touched`` as used now, in one transaction; then evict the
        least recently used entries beyond ``max_entries`` (down to 90% of it)."""
        conn = self._connection()
        if conn is None:
            return
        now = int(time.time())
        try:
            conn.execute("BEGIN IMMEDIATE")
            try:
                conn.executemany(
                    "INSERT OR REPLACE INTO hashes VALUES (?, ?, ?, ?, ?)",
                    [(p, key, h.sha256, h.md5, now) for p, (key, h) in entries.items()],
                )
                conn.executemany("UPDATE hashes SET used = ? WHERE path = ?", [(now, p) for p in touched])
                if entries:
                    excess = conn.execute("SELECT count(*) FROM hashes").fetchone()[0] - self.max_entries
                    if excess > 0:
                        conn.execute(
                            "DELETE FROM hashes WHERE path IN "
                            "(SELECT path FROM hashes ORDER BY used LIMIT ?)",
                            (excess + self.max_entries // 10,),
                        )
                conn.execute("COMMIT")
            except BaseException:
                conn.execute("ROLLBACK")
                raise
        except Exception as exc:
            self._fail(exc)

    def close(self) -> None:
        conn, self._conn = self._conn, None
        self._opened = False
        if conn is not None:
            conn.close()


class HashCache:
    """Content hashes of local files, trusted while a file's resolved path, size, mtime, ctime,
    device and inode are unchanged (a changed file changes its key, as in git's index and rsync).

    ``path``: a SQLite file that keeps the hashes across processes (a second ``fit()`` from a new
    kernel does not re-read unchanged files), shared safely by concurrent processes, bounded to
    ``max_entries`` files (least recently used evicted); None keeps them in memory only. A cache file
    that cannot be read or written is ignored with one warning; a corrupt one is replaced. Files
    modified less than 2 s before they were hashed are not cached (:data:`RACY_WINDOW_NS`), so a
    change that leaves size and timestamps equal cannot hide. ``hasher`` reads a file and ``clock``
    tells the time in ns, as :func:`time.time_ns` (both injected by tests). Thread-safe; :meth:`flush`
    writes what was hashed since the last flush."""

    def __init__(
        self,
        path: Path | None = None,
        *,
        max_entries: int = DEFAULT_HASH_CACHE_ENTRIES,
        hasher: Callable[[Path, int], FileDigest] = digest_file,
        clock: Callable[[], int] = time.time_ns,
    ) -> None:
        self.path = path
        self._store = _HashStore(path, max_entries) if path is not None else None
        self._hasher = hasher
        self._clock = clock
        self._entries: dict[tuple[bytes, str], _Hashes] = {}
        self._pending: dict[bytes, tuple[str, _Hashes]] = {}
        self._touched: set[bytes] = set()
        self._preloaded: dict[bytes, tuple[str, _Hashes, int]] = {}
        self._lock = threading.Lock()

    @staticmethod
    def _name(path: Path) -> bytes:
        # abspath, not resolve: no syscall per component; device and inode in the key tell links apart.
        return os.fsencode(os.path.abspath(path))

    def _lookup(self, name: bytes, key: str) -> _Hashes | None:
        with self._lock:
            hit = self._entries.get((name, key))
            if hit is not None or self._store is None:
                return hit
            stored = self._preloaded.pop(name) if name in self._preloaded else self._store.get(name)
            if stored is None or stored[0] != key:
                return None
            if stored[2] < time.time() - 86_400:  # last-used marks move at most daily: few writes
                self._touched.add(name)
            self._entries[(name, key)] = stored[1]
            return stored[1]

    def preload(self, directory: Path) -> None:
        """Read what the cache file holds for the files below ``directory`` in one query, rather than
        one query a file."""
        with self._lock:
            if self._store is not None:
                self._preloaded.update(self._store.get_under(self._name(directory)))

    def cached(
        self, path: Path, multipart_threshold: int, st: os.stat_result | None = None
    ) -> FileDigest | None:
        """The digest of ``path`` if it is cached and the file has not changed since; else None.
        ``st``: the file's ``os.stat`` result when the caller has just taken it."""
        st = os.stat(path) if st is None else st
        hit = self._lookup(self._name(path), _stat_key(st))
        return None if hit is None else hit.digest(st.st_size, multipart_threshold)

    def digest(self, path: Path, multipart_threshold: int) -> FileDigest:
        """The digest of ``path``: cached, or read (and cached unless the file just changed)."""
        name, before = self._name(path), os.stat(path)
        key = _stat_key(before)
        hit = self._lookup(name, key)
        result = None if hit is None else hit.digest(before.st_size, multipart_threshold)
        if result is not None:
            return result
        started = self._clock()
        result = self._hasher(path, multipart_threshold)
        after = os.stat(path)
        steady = _stat_key(after) == key and result.size == before.st_size
        if steady and max(before.st_mtime_ns, before.st_ctime_ns) < started - RACY_WINDOW_NS:
            hashes = _Hashes(result.sha256, result.etag)
            with self._lock:
                self._entries[(name, key)] = hashes
                if self._store is not None:
                    self._pending[name] = (key, hashes)
        return result

    def flush(self) -> None:
        """Write the hashes computed since the last flush to the cache file (one transaction)."""
        with self._lock:
            if self._store is None or not (self._pending or self._touched):
                return
            pending, self._pending = self._pending, {}
            touched, self._touched = self._touched, set()
            self._store.put(pending, touched - pending.keys())

    def close(self) -> None:
        """Flush, and close the cache file (reopened on next use)."""
        self.flush()
        with self._lock:
            if self._store is not None:
                self._store.close()
