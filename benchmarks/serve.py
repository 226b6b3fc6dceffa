"""``smlaunch serve``'s DescribeTrainingJob and ListTrainingJobs latency under 20 concurrent clients,
with 1,000 jobs in the store, against moto's server answering the same calls in the same run.

    python benchmarks/serve.py                      # 1,000 jobs, 20 clients, 25 calls each per side
    python benchmarks/serve.py --jobs 200 --calls 10

moto only records state (it runs nothing), so it is the floor for an API that also runs jobs. Both
servers are processes of their own on 127.0.0.1 and get the same 1,000 ``CreateTrainingJob``
requests through boto3. On smlaunch's, a first job that sleeps holds the only slot
(``--max-concurrent-jobs 1``) and the 1,000 wait in its queue, then all are stopped, so the store
holds 1,000 ended jobs (each a record the server wrote) beside one more that really ran. Then, per
side, 20 threads (one boto3 client each) call ``DescribeTrainingJob`` on random jobs and
``ListTrainingJobs`` (``MaxResults=100``, the default order, and ``StatusEquals=Stopped`` sorted by
name) in turns. Printed: p50 and p99 of each call on each side, and the ratio smlaunch / moto.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import boto3

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.functional._serve_helpers import (  # noqa: E402
    MotoS3,
    Server,
    create_request,
    free_port,
    upload_code,
    wait_status,
)


def _moto_sagemaker() -> tuple[subprocess.Popen[bytes], Any]:
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    client = boto3.client(
        "sagemaker",
        endpoint_url=f"http://127.0.0.1:{port}",
        region_name="us-west-2",
        aws_access_key_id="moto",
        aws_secret_access_key="moto",
    )
    deadline = time.monotonic() + 60
    while True:
        try:
            client.list_training_jobs()
            return proc, client
        except Exception:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def _measure(make_client: Any, names: list[str], clients: int, calls: int) -> dict[str, list[float]]:
    times: dict[str, list[float]] = {"describe": [], "list": [], "list-filtered": []}
    lock = threading.Lock()
    barrier = threading.Barrier(clients)

    def work(seed: int) -> None:
        client = make_client()
        pick = random.Random(seed)
        mine: dict[str, list[float]] = {key: [] for key in times}
        barrier.wait()
        for i in range(calls):
            start = time.perf_counter()
            client.describe_training_job(TrainingJobName=pick.choice(names))
            mine["describe"].append(time.perf_counter() - start)
            start = time.perf_counter()
            if i % 2:
                client.list_training_jobs(MaxResults=100)
                mine["list"].append(time.perf_counter() - start)
            else:
                client.list_training_jobs(MaxResults=100, StatusEquals="Stopped", SortBy="Name")
                mine["list-filtered"].append(time.perf_counter() - start)
        with lock:
            for key, values in mine.items():
                times[key] += values

    threads = [threading.Thread(target=work, args=(i,)) for i in range(clients)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return times


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--jobs", type=int, default=1000)
    parser.add_argument("--clients", type=int, default=20)
    parser.add_argument("--calls", type=int, default=25, help="calls of each kind per client")
    args = parser.parse_args()

    os.environ.update(AWS_ACCESS_KEY_ID="moto", AWS_SECRET_ACCESS_KEY="moto", AWS_DEFAULT_REGION="us-west-2")
    s3 = MotoS3()
    tmp = Path(tempfile.mkdtemp(prefix="serve-bench-"))
    server = Server(tmp, s3.url, max_concurrent_jobs=1)
    moto_proc, moto = _moto_sagemaker()
    try:
        server.start()
        ours = server.client()
        code = upload_code(s3.client, tmp, "sleepy", "import time\ntime.sleep(3600)\n")
        ours.create_training_job(**create_request("holder", code))
        wait_status(ours, "holder", {"Training"})
        names = [f"bench-{i:05d}" for i in range(args.jobs)]
        started = time.monotonic()
        for name in names:
            request = create_request(name, code)
            ours.create_training_job(**request)
            moto.create_training_job(**request)
        for name in names:
            ours.stop_training_job(TrainingJobName=name)
        ours.stop_training_job(TrainingJobName="holder")
        wait_status(ours, "holder", {"Stopped"})
        print(
            f"{args.jobs} jobs created on both sides in {time.monotonic() - started:.1f} s", file=sys.stderr
        )

        results = {}
        for side, make in (("smlaunch", server.client), ("moto", lambda: _moto_client(moto))):
            results[side] = _measure(make, names, args.clients, args.calls)
        print(f"{args.jobs} jobs, {args.clients} concurrent clients, load {os.getloadavg()[0]:.1f}")
        header = ("call", "smlaunch p50", "p99", "moto p50", "p99", "ratio p50", "p99")
        print("{:<14} {:>13} {:>8} {:>9} {:>8} {:>10} {:>6}".format(*header))
        for call in ("describe", "list", "list-filtered"):
            ours_times, theirs = results["smlaunch"][call], results["moto"][call]
            p50, p99 = _percentile(ours_times, 0.5), _percentile(ours_times, 0.99)
            m50, m99 = _percentile(theirs, 0.5), _percentile(theirs, 0.99)
            print(
                f"{call:<14} {p50 * 1000:>10.1f} ms {p99 * 1000:>5.0f} ms {m50 * 1000:>6.1f} ms "
                f"{m99 * 1000:>5.0f} ms {p50 / m50:>9.2f}x {p99 / m99:>5.2f}x"
            )
        every = {side: [t for values in times.values() for t in values] for side, times in results.items()}
        print(
            f"(every call: median smlaunch {statistics.median(every['smlaunch']) * 1000:.1f} ms, "
            f"moto {statistics.median(every['moto']) * 1000:.1f} ms)"
        )
    finally:
        server.stop()
        moto_proc.terminate()
        moto_proc.wait()
        s3.stop()
        from tests.functional._local_helpers import kill_leftover_jobs

        kill_leftover_jobs(server.store)


def _moto_client(template: Any) -> Any:
    return boto3.client(
        "sagemaker",
        endpoint_url=template.meta.endpoint_url,
        region_name="us-west-2",
        aws_access_key_id="moto",
        aws_secret_access_key="moto",
    )


if __name__ == "__main__":
    main()
