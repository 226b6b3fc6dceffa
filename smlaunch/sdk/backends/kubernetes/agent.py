"""The job's agent pod (``python3 -m smlaunch.sdk.backends.kubernetes.agent <job object name>``).

It runs the emulated platform's agent (:class:`smlaunch.sdk.backends.emulated.agent.Agent`: the
state machine, the failure policy, data, logs, artifacts) on a job directory inside this pod, with
the Kubernetes executor (:mod:`.executor`), and keeps the job's record in the root ConfigMap:

- at start, the job directory is written from the root's ``spec.json``, ``settings.json`` and
  ``state.json`` (what submit put there);
- while the job runs, ``state.json`` is copied into the root whenever it changes (that is what
  ``describe`` and ``attach`` read, from any machine), with ``FinalMetricDataList``, the last
  value of each metric the agent recorded (``logs/metrics.jsonl``, as a local job's ``describe``
  derives it), and the root's ``smlaunch.io/stop`` annotation (``stop()``) becomes the agent's stop
  request;
- the job log (the hosts' lines with their ``[algo-N/rank R]`` prefixes and the status lines) is
  this pod's log, which the notebook follows;
- at the end, the final state and the end of the job log go into the root, then the job's Service
  and this pod are deleted (the agent's ServiceAccount, Role and RoleBinding are owned by this pod,
  so the garbage collector removes them with it). The root stays: it is the job's record until
  ``smlaunch rm`` deletes it.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from smlaunch.sdk.backends.emulated.agent import Agent
from smlaunch.sdk.backends.emulated.job_settings import JobSettings
from smlaunch.sdk.backends.emulated.metrics import METRICS_FILE
from smlaunch.sdk.backends.emulated.state import JobDir, write_json_atomic
from smlaunch.sdk.backends.kubernetes.executor import KubernetesExecutor
from smlaunch.sdk.backends.kubernetes.plan import LOG_KEY, SPEC_KEY, STATE_KEY, STOP_ANNOTATION, agent_name

SETTINGS_KEY = "settings.json"
MIRROR_SECONDS = 1.0
LOG_TAIL_BYTES = 512 * 1024
"""The end of the job log kept in the root once the pods are gone (a ConfigMap holds at most 1 MiB)."""


class Mirror:
    """Copies the job directory's state into the root ConfigMap, and the job log to this pod's log."""

    def __init__(self, core: Any, namespace: str, base: str, job: JobDir, out: Any) -> None:
        self.core, self.namespace, self.base, self.job, self.out = core, namespace, base, job, out
        self._sent_state = b""
        self._log_offset = 0
        self._metrics_offset = 0
        self._final_metrics: dict[str, dict[str, Any]] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="mirror", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.wait(MIRROR_SECONDS):
            with contextlib.suppress(Exception):  # the API server may be briefly away: next round
                self.sync()

    def sync(self, final: bool = False) -> None:
        self.copy_log()
        state = self.state()
        patch: dict[str, Any] = {}
        if state != self._sent_state:
            patch[STATE_KEY] = state.decode()
        if final:
            with open(self.job.job_log, "rb") as handle:
                handle.seek(max(0, handle.seek(0, os.SEEK_END) - LOG_TAIL_BYTES))
                patch[LOG_KEY] = handle.read().decode("utf-8", errors="replace")
        if patch:
            self.core.patch_namespaced_config_map(self.base, self.namespace, {"data": patch})
            self._sent_state = state
        if not final:
            root = self.core.read_namespaced_config_map(self.base, self.namespace)
            if (root.metadata.annotations or {}).get(STOP_ANNOTATION):
                self.job.stop_file.touch()

    def state(self) -> bytes:
        """The job's state as the root keeps it: ``state.json`` and ``FinalMetricDataList``."""
        state = json.loads(self.job.state_file.read_bytes())
        metrics = self.final_metrics()
        if metrics:
            state["FinalMetricDataList"] = metrics
        return json.dumps(state).encode()

    def final_metrics(self) -> list[dict[str, Any]]:
        """The last value of each metric recorded so far (``Timestamp`` in epoch seconds), read
        from where the previous call stopped: the file is appended whole lines at a time."""
        path = self.job.logs_dir / METRICS_FILE
        with contextlib.suppress(FileNotFoundError), open(path, "rb") as handle:
            handle.seek(self._metrics_offset)
            data = handle.read()
            end = data.rfind(b"\n") + 1
            self._metrics_offset += end
            for line in data[:end].splitlines():
                with contextlib.suppress(ValueError, KeyError, TypeError):
                    item = json.loads(line)
                    name = str(item["name"])  # in the order the metrics first appeared
                    value = {"MetricName": name, "Value": float(item["value"]), "Timestamp": item["time"]}
                    self._final_metrics[name] = value
        return list(self._final_metrics.values())

    def copy_log(self) -> None:
        """New bytes of the job log, whole lines only, to this pod's log."""
        with open(self.job.job_log, "rb") as handle:
            handle.seek(self._log_offset)
            data = handle.read()
        end = data.rfind(b"\n") + 1
        if end:
            self.out.write(data[:end])
            self.out.flush()
            self._log_offset += end

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()


def write_job_dir(root_data: dict[str, str], job: JobDir) -> None:
    """The job directory as submit would have written it on this machine."""
    job.path.mkdir(parents=True, exist_ok=True)
    for log in (job.job_log, job.agent_log):
        job.open_log(log).close()
    write_json_atomic(job.spec_file, json.loads(root_data[SPEC_KEY]))
    job.settings_file.write_text(root_data[SETTINGS_KEY])
    write_json_atomic(job.state_file, json.loads(root_data[STATE_KEY]))


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m smlaunch.sdk.backends.kubernetes.agent <job object name>", file=sys.stderr)
        return 2
    base = args[0]
    namespace = os.environ["SMLAUNCH_K8S_NAMESPACE"]
    settings_text = ""
    from smlaunch.sdk.backends.kubernetes.client import kubernetes_module

    kubernetes = kubernetes_module()
    configuration = kubernetes.client.Configuration()
    kubernetes.config.load_incluster_config(client_configuration=configuration)
    core = kubernetes.client.CoreV1Api(kubernetes.client.ApiClient(configuration))
    root = core.read_namespaced_config_map(base, namespace)
    spec = json.loads(root.data[SPEC_KEY])
    job = JobDir(Path(tempfile.gettempdir()) / "smlaunch" / spec["TrainingJobName"])
    write_job_dir(root.data, job)
    settings_text = root.data[SETTINGS_KEY]
    # The pod's log is the job log (Mirror); the agent's own words go to its agent log.
    out = os.fdopen(os.dup(sys.stdout.fileno()), "wb")
    agent_log = job.open_log(job.agent_log)
    os.dup2(agent_log.fileno(), sys.stdout.fileno())
    os.dup2(agent_log.fileno(), sys.stderr.fileno())
    mirror = Mirror(core, namespace, base, job, out)
    mirror.start()
    executor = KubernetesExecutor.for_agent(JobSettings.model_validate_json(settings_text))
    try:
        code = Agent(job, executor=executor).run()
    finally:
        mirror.stop()
        for attempt in range(10):  # the record must be final before this pod goes
            try:
                mirror.sync(final=True)
                break
            except Exception as exc:
                print(f"could not record the final state ({exc}); retrying", flush=True)
                time.sleep(1 + attempt)
        _delete(core.delete_namespaced_service, base, namespace)
        _delete(core.delete_namespaced_pod, agent_name(base), namespace)
    return code


def _delete(call: Any, name: str, namespace: str) -> None:
    with contextlib.suppress(Exception):  # gone already, or the root's deletion took it
        call(name, namespace, propagation_policy="Background")


if __name__ == "__main__":
    sys.exit(main())
