"""``smlaunch serve``: start the training service (the command's flags and what it runs).

The server prints its endpoint URL on stdout (``http://127.0.0.1:PORT``, the port chosen when
``--port 0``) once it listens, and logs one line per request on stderr. It runs until SIGINT or
SIGTERM; the jobs it started keep running (each has an agent of its own) and a server started
again on the same store finds them, and its queue, again.
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading
from pathlib import Path
from typing import Any, TextIO

from smlaunch.sdk.errors import ConfigurationError
from smlaunch.serve.platforms import PLATFORMS, STORE, add_platform_flags, sessions

DEFAULT_PORT = 8080
DEFAULT_MAX_CONCURRENT_JOBS = 2
CREDENTIALS_FILE = "credentials"
"""Under ``<store>/.serve/``: the key pair made at the first start without ``--credentials``."""


def add_serve_command(commands: Any, epilog: str) -> None:
    """Add ``serve`` to the ``smlaunch`` command's subcommands."""
    serve: argparse.ArgumentParser = commands.add_parser(
        "serve",
        help="run a training service with SageMaker's API (boto3, the AWS CLI, the SageMaker SDK)",
        description="Serve SageMaker's CreateTrainingJob, DescribeTrainingJob, ListTrainingJobs, "
        "StopTrainingJob, AddTags/ListTags/DeleteTags, CloudWatch Logs' DescribeLogStreams, "
        "GetLogEvents and FilterLogEvents and CloudWatch's GetMetricStatistics and GetMetricData on "
        "/aws/sagemaker/TrainingJobs, and run the jobs on this machine, a Slurm cluster or a "
        "Kubernetes cluster (--platform). Clients sign with a key pair of --credentials (SigV4). "
        "Prints the endpoint URL on stdout; see docs/serve.md.",
        epilog=epilog,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    serve.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    serve.add_argument(
        "--port", type=int, default=DEFAULT_PORT, help=f"port (default {DEFAULT_PORT}; 0: any free)"
    )
    serve.add_argument(
        "--store", metavar="DIR", help="the job store (default: the root setting, ~/.smlaunch/jobs)"
    )
    serve.add_argument(
        "--platform",
        choices=PLATFORMS,
        default="local",
        help="where jobs run: local processes (default), one Docker container per host, a Slurm "
        "cluster (--slurm-shared-dir) or a Kubernetes cluster (--kubernetes-*)",
    )
    add_platform_flags(serve)
    serve.add_argument(
        "--instance-type-platform",
        metavar="TYPE=PLATFORM",
        action="append",
        default=[],
        help="run jobs of this instance type on this platform instead of --platform's "
        "(repeatable), e.g. ml.p4d.24xlarge=docker or ml.p4d.24xlarge=kubernetes",
    )
    serve.add_argument(
        "--credentials",
        metavar="FILE",
        help="the key pairs clients sign with, in the AWS shared-credentials format (default: "
        f"<store>/.serve/{CREDENTIALS_FILE}, made with a fresh key pair at the first start)",
    )
    serve.add_argument(
        "--max-concurrent-jobs",
        type=int,
        default=DEFAULT_MAX_CONCURRENT_JOBS,
        help="jobs running at once; later ones wait InProgress/Starting "
        f"(default {DEFAULT_MAX_CONCURRENT_JOBS})",
    )
    serve.add_argument(
        "--processes-per-host", type=int, help="ranks per emulated host (LocalSession's processes_per_host)"
    )
    serve.set_defaults(handler=cmd_serve)


def cmd_serve(args: argparse.Namespace, out: TextIO) -> int:
    """Run the server until SIGINT or SIGTERM."""
    from smlaunch.sdk.backends.emulated.backend import LocalBackend
    from smlaunch.serve import auth
    from smlaunch.serve.logs import LogsService
    from smlaunch.serve.records import SERVE_DIR
    from smlaunch.serve.server import Api, make_server
    from smlaunch.serve.training import TrainingService

    if args.max_concurrent_jobs < 1:
        raise ConfigurationError(
            "max_concurrent_jobs",
            args.max_concurrent_jobs,
            "must be >= 1",
            "pass --max-concurrent-jobs 1 or more",
        )
    if not 0 <= args.port <= 65535:
        raise ConfigurationError(
            "port", args.port, "not a TCP port", "pass --port 0 to 65535 (0: any free port)"
        )
    mapping = _instance_type_platforms(args.instance_type_platform)
    made = sessions(args, {args.platform, *mapping.values()})
    root = Path(made[STORE].root)
    if args.credentials:
        key_pairs = auth.load_key_pairs(args.credentials)
        credentials = Path(args.credentials)
    else:
        credentials = root / SERVE_DIR / CREDENTIALS_FILE
        if credentials.exists():
            key_pairs = auth.load_key_pairs(credentials)
        else:
            key_pairs = auth.create_key_pair_file(credentials)
            print(f"smlaunch serve: made a key pair for clients in {credentials}", file=sys.stderr)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(asctime)s %(name)s %(message)s")
    backends = {platform: each.backend() for platform, each in made.items()}
    assert isinstance(backends[STORE], LocalBackend)  # the emulated platform's, on the store
    platforms = {kind: backends[platform] for kind, platform in mapping.items()}
    training = TrainingService(
        backends[STORE], args.max_concurrent_jobs, platforms, default=backends[args.platform]
    )
    server = make_server(args.host, args.port, Api.build(training, LogsService(training), key_pairs))
    training.start()
    host, port = str(server.server_address[0]), int(server.server_address[1])
    print(
        f"smlaunch serve: {args.platform} jobs in {root}, at most {args.max_concurrent_jobs} at a time; "
        f"clients sign with a key pair of {credentials}",
        file=sys.stderr,
    )
    print(f"http://{host}:{port}", file=out, flush=True)

    def _shutdown(signum: int, frame: Any) -> None:
        threading.Thread(target=server.shutdown, daemon=True).start()

    previous = signal.signal(signal.SIGTERM, _shutdown)
    try:
        server.serve_forever(poll_interval=0.2)
    except KeyboardInterrupt:
        pass
    finally:
        signal.signal(signal.SIGTERM, previous)
        training.close()
        server.server_close()
    return 0


def _instance_type_platforms(pairs: list[str]) -> dict[str, str]:
    """``--instance-type-platform TYPE=PLATFORM`` flags as a mapping, each checked."""
    from smlaunch.sdk.request import catalog

    mapping: dict[str, str] = {}
    for pair in pairs:
        kind, _, platform = pair.partition("=")
        if platform not in PLATFORMS:
            raise ConfigurationError(
                "instance_type_platform",
                pair,
                f"the platform must be one of {', '.join(PLATFORMS)}",
                "pass --instance-type-platform ml.p4d.24xlarge=docker",
            )
        if not catalog.lookup(kind, "instance_type_platform").known:
            near = ", ".join(catalog.suggestions(kind)) or "see smlaunch.sdk.request.catalog.names()"
            raise ConfigurationError(
                "instance_type_platform", pair, "unknown instance type", f"use one of: {near}"
            )
        mapping[kind] = platform
    return mapping
