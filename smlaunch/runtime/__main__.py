"""``python -m smlaunch.runtime``, the ``smlaunch-train`` console script (``train`` in our images): one
host's part of a training job.

Steps: read the environment (``$SAGEMAKER_BASE_DIR`` or ``/opt/ml``, and ``os.environ``), create
the directories the script writes to, fetch the code into the code dir (skipped when it is already
there), install ``requirements.txt``, put the ranks' interpreter first on ``PATH``
(:mod:`smlaunch.runtime.interpreter`), wait (bounded) until every host name resolves when the job
spans hosts without an address map, pick the launcher, run it under the supervisor, and report.

Exit code: 0 on success; the failing process's exit code (``128 + N`` for a death by signal N);
``128 + signum`` when the runtime was stopped by SIGTERM/SIGINT; 1 for a bad configuration or an
internal error ("ClientError: ..." / "Framework Error: ..." in ``output/failure``), never 0.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, NoReturn

from smlaunch import contract

if TYPE_CHECKING:
    import argparse

    from smlaunch.runtime.launchers.base import RunResult

# argparse, socket and traceback are imported where they are used: every host runtime starts
# before its ranks, so what it imports is paid before the user's first line.

HOST_RESOLUTION_TIMEOUT_SECONDS = 900.0


class _Stopped(BaseException):
    """SIGTERM/SIGINT (or SIGHUP: the agent died) arrived before the ranks started (fetch, pip)."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


def _raise_stopped(signum: int, _frame: Any) -> None:
    raise _Stopped(signum)


def _log(host: str, message: str) -> None:
    try:
        print(f"[{host}] {message}", flush=True)
    except (OSError, ValueError):
        pass  # nothing reads the output any more (the agent died): the result files still tell all


def _outcome_line(result: RunResult, code: int) -> str:
    """The host's last line: it succeeded, was stopped (a stop asked for, not a failure), or failed;
    or the launcher's :attr:`RunResult.outcome` where the exit status does not tell."""
    if result.outcome is not None:
        return result.outcome
    if code == 0:
        return "training succeeded"
    if result.stop_signal is not None and result.first_failure is None:
        return f"stopped by {signal.Signals(result.stop_signal).name}"
    return f"training failed: exit code {code}"


def wait_for_hosts(hosts: list[str], timeout: float, log: Any) -> None:
    """Wait until every host name resolves (SageMaker's DNS can lag at start), at most ``timeout`` s."""
    import socket

    deadline = time.monotonic() + timeout
    delay = 0.1
    for host in hosts:
        while True:
            try:
                socket.gethostbyname(host)
                break
            except OSError as error:
                if time.monotonic() >= deadline:
                    raise TimeoutError(
                        f"host {host} did not resolve within {timeout:g} s: {error}"
                    ) from error
                time.sleep(delay)
                delay = min(delay * 2, 30.0)
    log(f"all {len(hosts)} hosts resolve")


def run(environ: Mapping[str, str]) -> int:
    """One host's job; returns the exit code. Writes ``success`` or ``failure`` before returning."""
    from dataclasses import replace

    from smlaunch.contract.archive import UnsafeArchiveError
    from smlaunch.contract.errors import HostConfigurationError
    from smlaunch.runtime.code import CodeFetcher
    from smlaunch.runtime.environment import Environment
    from smlaunch.runtime.interpreter import job_path
    from smlaunch.runtime.report import report_run, write_failure
    from smlaunch.runtime.requirements import InstallRequirementsError, prepare

    base_dir = environ.get(contract.BASE_DIR_ENV) or contract.DEFAULT_BASE_DIR
    paths = contract.Paths(base_dir)
    host = "runtime"
    stop_signals = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
    previous = {s: signal.signal(s, _raise_stopped) for s in stop_signals}
    prepared = None
    try:
        env = Environment.from_files(base_dir, environ)
        host = env.current_host
        verbose = environ.get(contract.SMLAUNCH_VERBOSE, "").strip().lower() not in ("", "0", "false")
        for directory in (
            paths.code_dir,
            paths.model_dir,
            paths.output_data_dir,
            paths.output_intermediate_dir,
        ):
            directory.mkdir(parents=True, exist_ok=True)
        fetched = CodeFetcher().fetch(
            env.sagemaker_hyperparameters.get(contract.HP_SUBMIT_DIRECTORY), env.code_dir
        )
        if fetched and verbose:
            _log(host, f"code from {env.module_dir} extracted into {env.code_dir}")
        # A ModelTrainer job installs what its SourceCode.requirements names, and only that.
        requirements = True if env.v3 is None else env.v3.source_code.get("requirements")
        prepared = prepare(
            env.code_dir,
            env.user_entry_point,
            env.environ,
            lambda m: _log(host, m),
            requirements=requirements,
        )
        # `python` and `pip` in the job (a .sh entry point, subprocess, os.system) are the ranks'
        # interpreter, as in SageMaker's images, whatever came first on the caller's PATH; with a
        # requirements environment that is its bin/ (with the console scripts pip installed), and
        # VIRTUAL_ENV names it, as its `activate` would.
        path = job_path(prepared.python, env.environ.get("PATH"))
        env = replace(env, environ={**env.environ, **prepared.environ, "PATH": path})
        if len(env.hosts) > 1 and not env.host_addresses:
            wait_for_hosts(env.hosts, HOST_RESOLUTION_TIMEOUT_SECONDS, lambda m: _log(host, m))

        from smlaunch.runtime.launchers import select_launcher
        from smlaunch.runtime.supervision.containment import Containment
        from smlaunch.runtime.supervision.supervisor import Supervisor

        launcher = select_launcher(env, python=prepared.python)
        supervisor = Supervisor.from_environ(
            host,
            env.environ,
            containment=Containment(host),
            seal=prepared.seal,
            verbose=verbose,
            topology_file=paths.output_dir / contract.TOPOLOGY_FILE,
        )
        result = launcher.run(supervisor)
        code = report_run(paths, result)
        _log(host, _outcome_line(result, code))
        return code
    except _Stopped as stop:
        name = signal.Signals(stop.signum).name
        _log(host, f"stopped by {name} before training started")
        write_failure(
            paths,
            f"Stopped: host {host} received {name} before training started",
            host=host,
            kind="stopped",
            exit_code=128 + stop.signum,
        )
        return 128 + stop.signum
    except (HostConfigurationError, UnsafeArchiveError, InstallRequirementsError, TimeoutError) as error:
        text = f"ClientError: {error}"
        _log(host, text)
        write_failure(paths, text, host=host, kind="framework_error", exit_code=1)
        return 1
    except Exception as error:
        import traceback

        text = f"Framework Error: \n{traceback.format_exc()}\n{error}"
        _log(host, text)
        try:
            write_failure(paths, text, host=host, kind="framework_error", exit_code=1)
        except OSError:
            pass
        return 1
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        if prepared is not None:
            prepared.release()  # the job's own requirements environment: gone with its last host


def build_parser() -> argparse.ArgumentParser:
    """``smlaunch-train [-h]``: the runtime takes its whole configuration from ``/opt/ml`` and the
    environment.

    Other arguments are ignored, as SageMaker's containers ignore the ``train`` argument they get.
    The usage line names the command as it was called: ``train`` in our images, else ``smlaunch-train``
    (also for ``python -m smlaunch.runtime``, whose ``argv[0]`` is a file path).
    """
    import argparse

    called = os.path.basename(sys.argv[0])
    return argparse.ArgumentParser(
        prog=called if called in ("train", "smlaunch-train") else "smlaunch-train",
        description=(
            "Run this host's part of a SageMaker-style training job "
            "(also: python -m smlaunch.runtime; `train` in our images)."
        ),
        epilog=(
            f"Reads {contract.DEFAULT_BASE_DIR}/input/config/*.json (or ${contract.BASE_DIR_ENV}): "
            "hyperparameters.json, resourceconfig.json, inputdataconfig.json; runs the entry point named "
            f"by the {contract.HP_PROGRAM} hyperparameter on every rank. Exit status: 0 on success, else "
            "the failing rank's exit code (128+N for a death by signal N), 1 for a bad configuration."
        ),
    )


def main(argv: list[str] | None = None) -> int:
    """Console-script entry (``smlaunch-train``); returns the exit code for ``sys.exit``."""
    args = sys.argv[1:] if argv is None else argv
    if args:  # none: nothing to parse (python -m smlaunch.runtime, as the agent starts it)
        build_parser().parse_known_args(args)
    return run(os.environ)


def exit_now(code: int) -> NoReturn:
    """Flush the output and end the process with ``code`` without the interpreter's teardown.

    The host's work is done and reported by then (every rank reaped, ``success`` or ``failure``
    written, every file closed); tearing the interpreter down would only add 10-15 ms that the
    agent, and so ``fit()``, waits for.
    """
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(code & 0xFF)


if __name__ == "__main__":
    exit_now(main())
