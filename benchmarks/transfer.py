"""Transfer benchmark: smlaunch's TransferEngine vs a sequential ``upload_file`` loop, in one run.

The baseline is what the SageMaker SDK's ``S3Uploader.upload`` / ``S3Downloader.download`` do: one
``upload_file`` (``download_file``) per file, one after another, default boto3 transfer settings.
Both sides talk to the same moto server on 127.0.0.1 (started here on a free port), with the same
client settings, so the ratios compare strategies, not servers.

Workloads: (a) 2,000 files of 64 KiB; (b) 4 files of 256 MiB; plus the second upload of the
unchanged directory (a). ``--scale 0.1`` shrinks counts and sizes for a quick run.

Then (a) again through ``latency_proxy.py``, which delays every request by ``--latency-ms`` (20 ms,
as a request from a training host to S3 typically waits): there, moto's CPU no longer bounds the
figures. The engine against the sequential loop and against ``aws s3 sync`` (when the AWS CLI is
installed; its default 10 concurrent requests), and the unchanged re-upload against the first.

The unchanged re-upload is measured three ways: a fresh engine with no hash cache (every file read
and hashed again), a new process whose engine finds the hashes in the persistent cache file the
first upload wrote (the user's case: a second ``fit()`` from a new kernel, same files; only its
``upload_dir`` call is timed, after one request to warm its connection, as the first upload's
client is warm) and the first upload's own engine (hashes in memory); each the median of 3 rounds.
Every other engine here keeps its hashes in memory only (``SMLAUNCH_HASH_CACHE=0``), so no first
upload finds earlier hashes.

Usage: ``python benchmarks/transfer.py [--scale S] [--concurrency N] [--latency-ms MS] [--skip-large]``
"""

from __future__ import annotations

import argparse
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

MiB = 1024 * 1024
REUPLOAD_ROUNDS = 3  # each second upload takes about half a second: a median of 3 tames the noise


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _wait_for_port(port: int, server: subprocess.Popen[bytes], timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise RuntimeError(f"moto server exited with {server.returncode}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return
        except OSError:
            time.sleep(0.1)
    server.kill()
    raise RuntimeError(f"moto server did not listen on 127.0.0.1:{port} within {timeout}s")


def _make_files(root: Path, count: int, size: int) -> list[Path]:
    root.mkdir(parents=True, exist_ok=True)
    block = os.urandom(min(size, 8 * MiB))
    paths = []
    for i in range(count):
        path = root / f"part-{i // 100:03d}" / f"file-{i:05d}.bin"
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "wb") as handle:
            written = 0
            header = i.to_bytes(8, "little")  # distinct content per file
            while written < size:
                chunk = (header + block)[: size - written]
                handle.write(chunk)
                written += len(chunk)
        paths.append(path)
    return paths


def _timed(fn: Callable[[], Any]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def _engine(client: Any, concurrency: int, cache_file: Path | None) -> Any:
    from smlaunch.contract.transfer.engine import TransferEngine
    from smlaunch.contract.transfer.hashes import HashCache

    return TransferEngine(
        client, max_concurrency=concurrency, progress=False, hash_cache=HashCache(cache_file)
    )


def _reupload(client: Any, directory: Path, tag: str, concurrency: int, work: Path) -> list[float]:
    """First upload of ``directory`` by an engine whose hash cache is a new file, then the unchanged
    second upload by a fresh engine without it, by a new process with it, and by the same engine,
    in :data:`REUPLOAD_ROUNDS` alternating rounds: the first upload's wall time, then each second
    upload's median.

    Into a bucket of its own: moto scans every key of a bucket to list one prefix, S3 does not, so
    the other workloads' keys would inflate the listing this measures."""
    client.create_bucket(Bucket=f"bench-{tag}")
    uri = f"s3://bench-{tag}/data"
    cache_file = work / f"hashes-{tag}.sqlite"
    root = str(Path(__file__).resolve().parents[1])
    child_args = [client.meta.endpoint_url, str(directory), uri, str(cache_file), str(concurrency)]
    child_env = {**os.environ, "PYTHONPATH": os.pathsep.join([root, os.environ.get("PYTHONPATH", "")])}

    def new_process() -> float:
        child = subprocess.run(
            [sys.executable, __file__, "--child-reupload", *child_args],
            check=True,
            stdout=subprocess.PIPE,
            text=True,
            env=child_env,
        )
        return float(child.stdout.split()[-1])

    cold: list[float] = []
    process: list[float] = []
    warm: list[float] = []
    with _engine(client, concurrency, cache_file) as first_engine:
        first = _timed(lambda: first_engine.upload_dir(directory, uri))
        for _ in range(REUPLOAD_ROUNDS):
            with _engine(client, concurrency, None) as fresh:
                cold.append(_timed(lambda e=fresh: e.upload_dir(directory, uri)))
            process.append(new_process())
            warm.append(_timed(lambda: first_engine.upload_dir(directory, uri)))
    return [first, statistics.median(cold), statistics.median(process), statistics.median(warm)]


def _child_reupload(endpoint: str, directory: str, uri: str, cache_file: str, concurrency: str) -> None:
    """In a new process: the unchanged re-upload with the persistent cache; prints its seconds."""
    import boto3
    from botocore.config import Config

    client = boto3.client(
        "s3",
        endpoint_url=endpoint,
        region_name="us-east-1",
        config=Config(max_pool_connections=max(10, int(concurrency))),
    )
    client.head_bucket(Bucket=uri.split("/")[2])  # the connection a notebook's session has open
    with _engine(client, int(concurrency), Path(cache_file)) as engine:
        start = time.perf_counter()
        summary = engine.upload_dir(directory, uri)
        seconds = time.perf_counter() - start
    if summary.transferred or not summary.skipped:
        raise RuntimeError(f"the unchanged re-upload sent {len(summary.transferred)} file(s)")
    print(seconds)


def _print_reupload(first: float, second_cold: float, second_process: float, second_warm: float) -> None:
    title = f"re-upload of unchanged (a), median of {REUPLOAD_ROUNDS}"
    print(f"{title:40s} {'first':>13s} {'second':>11s}")
    for label, second in (
        ("fresh engine, no hash cache", second_cold),
        ("new process, persistent cache", second_process),
        ("same engine (hashes in memory)", second_warm),
    ):
        print(f"  {label:38s} {first:13.2f} {second:11.3f} {first / second:8.1f}x")


def _latency_run(server_port: int, directory: Path, args: argparse.Namespace, work: Path) -> None:
    """Workload (a) again, every request through a proxy that delays it by ``--latency-ms``: the
    engine vs the sequential loop, vs ``aws s3 sync`` (when the AWS CLI is installed), and the
    unchanged re-upload vs the first, side by side."""
    import boto3
    from botocore.config import Config

    from smlaunch.contract.transfer.engine import TransferEngine

    proxy = subprocess.Popen(
        [
            sys.executable,
            str(Path(__file__).with_name("latency_proxy.py")),
            "--target-port",
            str(server_port),
            "--delay-ms",
            str(args.latency_ms),
            "--max-seconds",
            "3600",
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
    )
    try:
        assert proxy.stdout is not None
        line = proxy.stdout.readline().decode().split()
        if len(line) != 2 or line[0] != "listening":
            raise RuntimeError(f"latency proxy did not start: {line}")
        endpoint = f"http://127.0.0.1:{line[1]}"
        client = boto3.client(
            "s3",
            endpoint_url=endpoint,
            region_name="us-east-1",
            config=Config(max_pool_connections=max(10, args.concurrency)),
        )
        rtt = _timed(lambda: client.head_bucket(Bucket="bench"))
        n_files = sum(1 for p in directory.rglob("*") if p.is_file())

        def sequential() -> None:
            for path in sorted(p for p in directory.rglob("*") if p.is_file()):
                client.upload_file(str(path), "bench", f"lat-base/{path.relative_to(directory).as_posix()}")

        base = _timed(sequential)
        with TransferEngine(client, max_concurrency=args.concurrency, progress=False) as engine:
            ours = _timed(lambda: engine.upload_dir(directory, "s3://bench/lat-ours"))
        aws = shutil.which("aws")
        cli = None
        if aws is not None:
            cli = _timed(
                lambda: subprocess.run(
                    [
                        aws,
                        "s3",
                        "sync",
                        "--only-show-errors",
                        "--endpoint-url",
                        endpoint,
                        str(directory),
                        "s3://bench/lat-cli",
                    ],
                    check=True,
                    env={**os.environ, "HOME": str(work)},
                )
            )
        reupload = _reupload(client, directory, "lat-again", args.concurrency, work)
    finally:
        if proxy.stdin is not None:
            proxy.stdin.close()  # the proxy stops when its stdin closes
        try:
            proxy.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proxy.kill()
            proxy.wait(timeout=10)
    print(
        f"\nthrough a {args.latency_ms:.0f} ms latency proxy (one HeadBucket took {1000 * rtt:.0f} ms), "
        f"{n_files} x 64 KiB"
    )
    print(f"{'workload':40s} {'baseline s':>13s} {'smlaunch s':>11s} {'speed-up':>9s}")
    print(f"{'upload vs sequential upload_file':40s} {base:13.2f} {ours:11.2f} {base / ours:8.1f}x")
    if cli is None:
        print("upload vs aws s3 sync: AWS CLI not installed")
    else:
        print(f"{'upload vs aws s3 sync':40s} {cli:13.2f} {ours:11.2f} {cli / ours:8.1f}x")
    _print_reupload(*reupload)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scale", type=float, default=1.0, help="shrink counts and sizes (0 < scale <= 1)")
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument(
        "--latency-ms",
        type=float,
        default=20.0,
        help="also run (a) through a proxy adding this request latency (0: skip)",
    )
    parser.add_argument("--skip-large", action="store_true", help="leave out workload (b)")
    parser.add_argument("--child-reupload", nargs=5, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child_reupload:
        _child_reupload(*args.child_reupload)
        return

    import boto3
    from botocore.config import Config

    from smlaunch.contract.transfer.engine import TransferEngine

    for var, value in {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
    }.items():
        os.environ.setdefault(var, value)
    os.environ["SMLAUNCH_HASH_CACHE"] = "0"  # hashes in memory, unless an engine is given a file
    port = _free_port()
    # A separate server process, as S3 is: an in-process ThreadedMotoServer would share this
    # process's GIL with the transfer threads being measured.
    server = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    _wait_for_port(port, server)
    work = Path(tempfile.mkdtemp(prefix="smlaunch-bench-"))
    try:
        client = boto3.client(
            "s3",
            endpoint_url=f"http://127.0.0.1:{port}",
            region_name="us-east-1",
            config=Config(max_pool_connections=max(10, args.concurrency)),
        )
        client.create_bucket(Bucket="bench")
        engine = TransferEngine(client, max_concurrency=args.concurrency, progress=False)

        n_small = max(20, int(2000 * args.scale))
        n_large, large_size = 4, max(8 * MiB, int(256 * MiB * args.scale))
        small_dir, large_dir = work / "small", work / "large"
        _make_files(small_dir, n_small, 64 * 1024)
        if not args.skip_large:
            _make_files(large_dir, n_large, large_size)

        def baseline_upload(directory: Path, prefix: str) -> None:
            for path in sorted(p for p in directory.rglob("*") if p.is_file()):
                client.upload_file(str(path), "bench", f"{prefix}/{path.relative_to(directory).as_posix()}")

        def baseline_download(prefix: str, directory: Path) -> None:
            for page in client.get_paginator("list_objects_v2").paginate(Bucket="bench", Prefix=prefix):
                for obj in page.get("Contents", []):
                    dest = directory / obj["Key"][len(prefix) :].lstrip("/")
                    dest.parent.mkdir(parents=True, exist_ok=True)
                    client.download_file("bench", obj["Key"], str(dest))

        rows: list[tuple[str, float, float]] = []
        workloads = [(f"(a) {n_small} x 64 KiB", small_dir)]
        if not args.skip_large:
            workloads.append((f"(b) {n_large} x {large_size // MiB} MiB", large_dir))
        for label, directory in workloads:
            tag = directory.name
            base_up = _timed(lambda d=directory, t=tag: baseline_upload(d, f"base-{t}"))
            ours_up = _timed(lambda d=directory, t=tag: engine.upload_dir(d, f"s3://bench/ours-{t}"))
            rows.append((f"upload   {label}", base_up, ours_up))
            base_dl = _timed(lambda t=tag: baseline_download(f"base-{t}", work / f"dl-base-{t}"))
            ours_dl = _timed(
                lambda t=tag: engine.download_prefix(f"s3://bench/ours-{t}", work / f"dl-ours-{t}")
            )
            rows.append((f"download {label}", base_dl, ours_dl))
            shutil.rmtree(work / f"dl-base-{tag}", ignore_errors=True)
            shutil.rmtree(work / f"dl-ours-{tag}", ignore_errors=True)

        # Unchanged directory: the second upload three ways (see the docstring) against the first.
        reupload = _reupload(client, small_dir, "again", args.concurrency, work)
        engine.close()

        # What the server allows: the same tiny request sequentially and from many threads. The
        # ratio bounds every speed-up above (a request-bound workload cannot beat it).
        client.put_object(Bucket="bench", Key="probe", Body=b"x")
        probes = 200

        def head(_: int) -> None:
            client.head_object(Bucket="bench", Key="probe")

        one_by_one = _timed(lambda: [head(i) for i in range(probes)])
        with ThreadPoolExecutor(max_workers=args.concurrency) as pool:
            parallel = _timed(lambda: list(pool.map(head, range(probes))))

        print(
            f"moto server 127.0.0.1:{port}, scale {args.scale}, concurrency {args.concurrency}, "
            f"{os.cpu_count()} CPUs"
        )
        print(f"{'workload':40s} {'sequential s':>13s} {'smlaunch s':>11s} {'speed-up':>9s}")
        for name, base, ours in rows:
            print(f"{name:40s} {base:13.2f} {ours:11.2f} {base / ours:8.1f}x")
        _print_reupload(*reupload)
        print(
            f"server ceiling: HEAD {1000 * one_by_one / probes:.1f} ms sequential, "
            f"{1000 * parallel / probes:.1f} ms/request with {args.concurrency} threads: at most "
            f"{one_by_one / parallel:.1f}x for request-bound work on this machine"
        )
        if args.latency_ms > 0:
            _latency_run(port, small_dir, args, work)
    finally:
        server.terminate()
        try:
            server.wait(timeout=10)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait(timeout=10)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
