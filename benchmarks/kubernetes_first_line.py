"""Time to the user's first line on Kubernetes: ``fit()`` through ``KubernetesSession`` against a bare
Pod of the same image running the same script (what ``kubectl run`` creates), in one run.

    python benchmarks/kubernetes_first_line.py              # median of 3
    python benchmarks/kubernetes_first_line.py --repeat 5
    KUBECONFIG=... python benchmarks/kubernetes_first_line.py --image smlaunch-cpu:TAG

What is measured (wall clock on one machine: the pods run on this machine's node, so their clock
is this one's; rounds alternated so that a change in load hits both cases alike):

- **smlaunch**: ``PyTorch(...).fit(wait=True, logs=True)`` (logs into a buffer), 1 host x 1 rank,
  of a script that prints ``time.time()`` as its first statement; time to first line = that
  timestamp minus the moment ``fit()`` was called. Included: the source upload to S3 (a moto
  server on 127.0.0.1), the job's objects created through the API server, the agent pod scheduled
  and started, the host's tree written and its pod created, scheduled and started, the tree fetched,
  the runtime and the rank started.
- **baseline**: the API equivalent of ``kubectl run --restart=Never --image=IMAGE -- python3 -c
  SCRIPT``: one Pod of the same image on the host network, ``imagePullPolicy: Never``; time to first
  line = the script's timestamp minus the moment ``create_namespaced_pod`` was called.

The cluster: ``$KUBECONFIG`` when set (a namespace is created there and deleted after; the image
must be on the nodes and the pods must reach 127.0.0.1, i.e. a single-node cluster on this machine
as the dev cluster), else the dev cluster ``tools/k8s_dev_cluster.sh`` starts in a temporary run
directory and stops at the end. Where neither can be had (no cache built, no Docker engine, not
root, a kubelet already running), the benchmark says why and exits 0: skipped, not failed.
The image: ``--image``, else ``$SMLAUNCH_TEST_IMAGE``, else ``container/build.sh cpu --extra
kubernetes`` (reused from Docker's cache when built before).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import logging
import os
import re
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
SCRIPT = 'import time\nprint(f"FIRST_LINE {time.time():.6f}", flush=True)\n'
FIRST_LINE = re.compile(r"FIRST_LINE (\d+\.\d+)")
BUCKET = "bench"


class Skip(Exception):
    """The benchmark cannot run here; the message says why."""


def _first_line(text: str, start: float) -> float:
    times = [float(m.group(1)) for m in FIRST_LINE.finditer(text)]
    if not times:
        raise RuntimeError(f"no first line in the output:\n{text[-2000:]}")
    return min(times) - start


@contextlib.contextmanager
def cluster() -> Iterator[str]:
    """A kubeconfig: ``$KUBECONFIG``'s, else a dev cluster started (and stopped) here."""
    given = os.environ.get("KUBECONFIG")
    if given:
        yield given
        return
    script = REPO / "tools" / "k8s_dev_cluster.sh"
    with tempfile.TemporaryDirectory(prefix="smlaunch-k8s-bench-") as tmp:
        env = {**os.environ, "SMLAUNCH_K8S_RUN": str(Path(tmp) / "run")}
        started = subprocess.run(
            [str(script), "start"], env=env, capture_output=True, text=True, timeout=300, check=False
        )
        if started.returncode != 0:
            raise Skip(f"no Kubernetes dev cluster: {started.stderr.strip()[-800:]}")
        try:
            yield started.stdout.strip().splitlines()[-1]
        finally:
            subprocess.run([str(script), "stop"], env=env, capture_output=True, timeout=300, check=False)


def image(given: str | None) -> str:
    """The image both cases run (see the module docstring)."""
    if given or os.environ.get("SMLAUNCH_TEST_IMAGE"):
        return str(given or os.environ["SMLAUNCH_TEST_IMAGE"])
    built = subprocess.run(
        [str(REPO / "container" / "build.sh"), "cpu", "--extra", "scikit-learn kubernetes<37"],
        capture_output=True,
        text=True,
        timeout=2400,
        check=False,
    )
    if built.returncode == 2:
        raise Skip(f"cannot build the image: {built.stderr.strip()[-500:]}")
    if built.returncode != 0:
        raise RuntimeError(built.stderr[-3000:])
    return built.stdout.strip().splitlines()[-1]


@contextlib.contextmanager
def s3_server() -> Iterator[Any]:
    """A moto S3 server on 127.0.0.1 with :data:`BUCKET` (dummy credentials in this environment)."""
    import boto3
    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # moto's request lines: not the figures
    for key, value in (
        ("AWS_ACCESS_KEY_ID", "testing"),
        ("AWS_SECRET_ACCESS_KEY", "testing"),
        ("AWS_DEFAULT_REGION", "us-east-1"),
    ):
        os.environ[key] = value
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    try:
        client = boto3.client("s3", endpoint_url=f"http://127.0.0.1:{port}", region_name="us-east-1")
        client.create_bucket(Bucket=BUCKET)
        yield client
    finally:
        server.stop()


@contextlib.contextmanager
def namespace(core: Any) -> Iterator[str]:
    """A fresh namespace with its token and the ``aws`` Secret the job's pods read; deleted after."""
    from kubernetes import client

    name = f"bench-{uuid.uuid4().hex[:8]}"
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
    try:
        deadline = time.monotonic() + 60
        while not any(
            a.metadata.name == "default" and a.secrets
            for a in core.list_namespaced_service_account(name).items
        ):
            if time.monotonic() > deadline:
                raise RuntimeError(f"no token for {name}:default after 60 s")
            time.sleep(0.5)
        core.create_namespaced_secret(
            name,
            client.V1Secret(
                metadata=client.V1ObjectMeta(name="aws"),
                string_data={
                    "AWS_ACCESS_KEY_ID": "testing",
                    "AWS_SECRET_ACCESS_KEY": "testing",
                    "AWS_DEFAULT_REGION": "us-east-1",
                },
            ),
        )
        yield name
    finally:
        core.delete_namespace(name)


def bare_pod(core: Any, ns: str, image_tag: str) -> float:
    """Seconds from creating a bare Pod (``kubectl run``'s) to its script's first line."""
    from kubernetes import client

    name = f"run-{uuid.uuid4().hex[:8]}"
    pod = client.V1Pod(
        metadata=client.V1ObjectMeta(name=name),
        spec=client.V1PodSpec(
            restart_policy="Never",
            host_network=True,
            termination_grace_period_seconds=0,
            containers=[
                client.V1Container(
                    name="main",
                    image=image_tag,
                    image_pull_policy="Never",
                    command=["python3", "-c", SCRIPT],
                )
            ],
        ),
    )
    start = time.time()
    core.create_namespaced_pod(ns, pod)
    deadline = time.monotonic() + 300
    while core.read_namespaced_pod(name, ns).status.phase not in ("Succeeded", "Failed"):
        if time.monotonic() > deadline:
            raise RuntimeError(f"pod {name} did not end within 300 s")
        time.sleep(0.1)
    text = core.read_namespaced_pod_log(name, ns)
    core.delete_namespaced_pod(name, ns, grace_period_seconds=0)
    return _first_line(text, start)


def smlaunch(kubeconfig: str, ns: str, image_tag: str, s3: Any, source_dir: Path) -> float:
    """Seconds from the ``fit()`` call to the script's first line, on the cluster."""
    from smlaunch import KubernetesSession, PyTorch

    session = KubernetesSession(
        namespace=ns,
        kubeconfig=kubeconfig,
        image=image_tag,
        image_pull_policy="Never",
        resources="off",
        host_network=True,
        storage={"s3": {"endpoint_url": s3.meta.endpoint_url, "credentials_secret": "aws"}},
        stop_grace_seconds=5,
        s3_client=s3,
    )
    estimator = PyTorch(
        entry_point="first_line.py",
        source_dir=str(source_dir),
        role="arn:aws:iam::111122223333:role/bench",
        instance_type="ml.c5.xlarge",
        instance_count=1,
        framework_version="2.1.0",
        py_version="py310",
        base_job_name="first-line",
        output_path=f"s3://{BUCKET}/out",
        sagemaker_session=session,
    )
    logs = io.StringIO()
    start = time.time()
    with contextlib.redirect_stdout(logs):
        estimator.fit(wait=True, logs=True)
    return _first_line(logs.getvalue(), start)


def run(repeat: int, image_given: str | None) -> None:
    from kubernetes import client, config

    with cluster() as kubeconfig, s3_server() as s3:
        image_tag = image(image_given)
        core = client.CoreV1Api(config.new_client_from_config(config_file=kubeconfig))
        work = Path(tempfile.mkdtemp(prefix="smlaunch-k8s-first-line-"))
        (work / "first_line.py").write_text(SCRIPT)
        before = ", ".join(f"{x:.2f}" for x in os.getloadavg())
        print(f"time to the first line on Kubernetes (median of {repeat}; {os.cpu_count()} CPUs)", flush=True)
        print(f"  image {image_tag}; load average before: {before}", flush=True)
        runs: dict[str, list[float]] = {"pod": [], "smlaunch": []}
        with namespace(core) as ns:
            for _ in range(repeat):
                runs["pod"].append(bare_pod(core, ns, image_tag))
                runs["smlaunch"].append(smlaunch(kubeconfig, ns, image_tag, s3, work))
        base = statistics.median(runs["pod"])
        median = statistics.median(runs["smlaunch"])
        print(f"  {'bare Pod (kubectl run)':<26} {base:6.2f} s   runs {[round(x, 2) for x in runs['pod']]}")
        print(
            f"  {'smlaunch 1 host x 1 rank':<26} {median:6.2f} s   "
            f"ratio {median / base:4.1f}x the bare Pod   runs {[round(x, 2) for x in runs['smlaunch']]}",
            flush=True,
        )
        after = ", ".join(f"{x:.2f}" for x in os.getloadavg())
        print(f"  load average after: {after}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=3, help="runs per case (the median is reported)")
    parser.add_argument("--image", help="the image both cases run (default: see --help's text)")
    args = parser.parse_args(argv)
    try:
        import kubernetes  # noqa: F401
    except ImportError:
        print("skipped: the kubernetes client is not installed (pip install 'smlaunch[kubernetes]')")
        return 0
    try:
        run(args.repeat, args.image)
    except Skip as skip:
        print(f"skipped: {skip}")
        return 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
