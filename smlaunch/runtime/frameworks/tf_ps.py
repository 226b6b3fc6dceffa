"""``python -m smlaunch.runtime.frameworks.tf_ps <entry argv...>``: one host of a TensorFlow parameter-server
job, as
SageMaker's TensorFlow toolkit runs it (``training.py``: ``_run_ps``, ``_run_worker``,
``_wait_until_master_is_down``).

``TF_CONFIG`` (from :func:`smlaunch.runtime.frameworks.tf_config.ps_config`) says this host's training role:
``master``
(the first host) or ``worker``. Every host also serves a parameter server: a child process
(``python -m smlaunch.runtime.frameworks.tf_ps --serve``, kept off the GPUs as the toolkit does) running
``tf.distribute.Server`` with the same cluster and the task ``{"type": "ps", "index": <host index>}``.
Then the training script runs with the host's ``TF_CONFIG``. When it ends, a worker host keeps its
parameter server up until the master's port stops answering (the other hosts may still need it),
then stops it; the exit code is the script's. SIGTERM and SIGINT are forwarded to both children.

Only ``--serve`` imports TensorFlow; the wrapper itself does not.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from typing import Any

POLL_SECONDS = 1.0


def ps_task_config(tf_config: dict[str, Any]) -> dict[str, Any]:
    """The parameter server's ``TF_CONFIG`` for the host whose training ``TF_CONFIG`` is given: the
    same cluster, task ``ps`` with the host's index (the master is host 0, worker ``i`` host ``i+1``)."""
    task = tf_config["task"]
    index = 0 if task["type"] == "master" else int(task["index"]) + 1
    return {**tf_config, "task": {"index": index, "type": "ps"}}


def _answers(address: str) -> bool:
    host, _, port = address.rpartition(":")
    try:
        with socket.create_connection((host, int(port)), timeout=2):
            return True
    except OSError:
        return False


def server_command() -> list[str]:
    """The parameter server's argv."""
    return [sys.executable, "-m", "smlaunch.runtime.frameworks.tf_ps", "--serve"]


def serve() -> int:
    """Run this host's parameter server until it is stopped."""
    import tensorflow as tf

    config = json.loads(os.environ["TF_CONFIG"])
    server = tf.distribute.Server(
        tf.train.ClusterSpec(config["cluster"]),
        job_name="ps",
        task_index=int(config["task"]["index"]),
        protocol="grpc",
    )
    server.join()
    return 0


def run(entry: list[str]) -> int:
    """Start the parameter server and the training script; the script's exit code."""
    tf_config = json.loads(os.environ["TF_CONFIG"])
    ps_env = dict(os.environ, TF_CONFIG=json.dumps(ps_task_config(tf_config)), CUDA_VISIBLE_DEVICES="")
    server = subprocess.Popen(server_command(), env=ps_env)
    worker = subprocess.Popen(entry)
    stopping = False

    def forward(signum: int, _frame: Any) -> None:
        nonlocal stopping
        stopping = True
        for child in (worker, server):
            if child.poll() is None:
                child.send_signal(signum)

    signal.signal(signal.SIGTERM, forward)
    signal.signal(signal.SIGINT, forward)
    code = worker.wait()
    if tf_config["task"]["type"] != "master" and code == 0:
        master = tf_config["cluster"]["master"][0]
        while not stopping and server.poll() is None and _answers(master):
            time.sleep(POLL_SECONDS)
    if server.poll() is None:
        server.terminate()
        try:
            server.wait(timeout=10)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
    return code


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if args == ["--serve"]:
        return serve()
    if not args:
        print("usage: python -m smlaunch.runtime.frameworks.tf_ps <entry argv...> | --serve", file=sys.stderr)
        return 2
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
