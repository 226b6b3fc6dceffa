"""``python -m smlaunch.runtime`` for real: hosts as processes, ranks as processes, gloo over 127.0.0.1.

Each test writes one ``/opt/ml`` tree per host (``_runtime_tree.write_host_tree``), starts one
runtime per host with ``SAGEMAKER_BASE_DIR`` and the host-address map the local backend would pass,
and checks what the user's script saw, the exit code, the success/failure files, and that no
process is left behind (every rank runs with its cwd inside the test's tmp dir).
"""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
import tarfile
import threading
import time
from collections.abc import Iterator, Mapping
from pathlib import Path

import psutil
import pytest

from smlaunch import contract
from smlaunch.contract.processes import free_port
from tests.functional._runtime_tree import write_host_tree

HOST_TIMEOUT = 60


def processes_under(root: Path) -> list[psutil.Process]:
    """Live processes whose working directory is inside ``root`` (our ranks run in the code dir)."""
    found = []
    for proc in psutil.process_iter(["pid"]):
        try:
            if proc.pid != os.getpid() and Path(proc.cwd()).is_relative_to(root):
                if proc.status() != psutil.STATUS_ZOMBIE:
                    found.append(proc)
        except (psutil.NoSuchProcess, psutil.AccessDenied, FileNotFoundError):
            continue
    return found


def assert_no_process_left(root: Path) -> None:
    deadline = time.monotonic() + 5
    while processes_under(root) and time.monotonic() < deadline:
        time.sleep(0.1)
    left = processes_under(root)
    for proc in left:
        proc.kill()
    assert not left, [p.cmdline() for p in left]


class HostRun:
    """One ``python -m smlaunch.runtime`` process, its output collected line by line."""

    def __init__(self, base: Path, extra_env: Mapping[str, str]) -> None:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("SM_", "SMLAUNCH_", "SAGEMAKER_"))}
        env.update({contract.BASE_DIR_ENV: str(base), "PYTHONUNBUFFERED": "1", **extra_env})
        self.lines: list[str] = []
        self._cond = threading.Condition()
        self.popen = subprocess.Popen(
            [sys.executable, "-m", "smlaunch.runtime"],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.popen.stdout is not None
        for line in self.popen.stdout:
            with self._cond:
                self.lines.append(line.rstrip("\n"))
                self._cond.notify_all()

    def wait_for(self, text: str, count: int = 1, timeout: float = HOST_TIMEOUT) -> None:
        with self._cond:
            ok = self._cond.wait_for(lambda: sum(text in line for line in self.lines) >= count, timeout)
        assert ok, f"{text!r} x{count} not seen in:\n" + "\n".join(self.lines)

    def wait(self, timeout: float = HOST_TIMEOUT) -> int:
        try:
            code = self.popen.wait(timeout)
        except subprocess.TimeoutExpired:
            os.killpg(self.popen.pid, signal.SIGKILL)
            self.popen.wait(10)
            raise
        self._reader.join(5)
        return code

    @property
    def output(self) -> str:
        return "\n".join(self.lines)


@pytest.fixture
def job(tmp_path: Path) -> Iterator[Path]:
    yield tmp_path
    assert_no_process_left(tmp_path)


def write_code(root: Path, script: str, name: str = "train.py") -> Path:
    src = root / "src"
    src.mkdir(parents=True, exist_ok=True)
    (src / name).write_text(script)
    return src


def script_hps(src: Path, extra: Mapping[str, str] | None = None) -> dict[str, str]:
    return {
        contract.HP_PROGRAM: '"train.py"',
        contract.HP_SUBMIT_DIRECTORY: json.dumps(f"file://{src}"),
        contract.HP_JOB_NAME: '"test-job"',
        **(extra or {}),
    }


SINGLE = r"""
import json, os, sys
out = {"argv": sys.argv[1:], "env": {k: v for k, v in os.environ.items() if k.startswith("SM_")},
       "cwd": os.getcwd()}
with open(os.path.join(os.environ["SM_MODEL_DIR"], "seen.json"), "w") as f:
    json.dump(out, f)
print("hello from the script")
"""


def test_single_process_sees_sm_env_and_argv(job: Path) -> None:
    src = write_code(job, SINGLE)
    hps = script_hps(src, {"epochs": "3", "lr": "0.01", "name": '"a b"', "layers": "[1, 2]", "x": "null"})
    paths = write_host_tree(job / "algo-1", "algo-1", ["algo-1"], hps, channels={"train": {}})
    host = HostRun(job / "algo-1", {contract.TRAINING_JOB_NAME_ENV: "test-job"})
    assert host.wait() == 0, host.output
    seen = json.loads((paths.model_dir / "seen.json").read_text())
    assert seen["argv"] == ["--epochs", "3", "--layers", "[1, 2]", "--lr", "0.01", "--name", "a b", "-x", ""]
    env = seen["env"]
    assert env["SM_HOSTS"] == '["algo-1"]'
    assert env["SM_CURRENT_HOST"] == "algo-1"
    assert env["SM_MODEL_DIR"] == str(paths.model_dir)
    assert env["SM_CHANNEL_TRAIN"] == str(paths.channel_dir("train"))
    assert env["SM_HP_NAME"] == "a b"
    assert json.loads(env["SM_HPS"]) == {"epochs": 3, "lr": 0.01, "name": "a b", "layers": [1, 2], "x": None}
    assert json.loads(env["SM_TRAINING_ENV"])["job_name"] == "test-job"
    assert env["SM_USER_ENTRY_POINT"] == "train.py"
    assert Path(seen["cwd"]) == paths.code_dir.resolve()
    assert "[algo-1/rank 0] hello from the script" in host.output
    assert paths.success_file.exists() and not paths.failure_file.exists()


DDP = r"""
import json, os, sys
import torch
import torch.distributed as dist
dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
t = torch.tensor([float(rank + 1)])
dist.all_reduce(t)
keys = ["RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "NODE_RANK", "GROUP_RANK", "MASTER_ADDR",
        "MASTER_PORT", "TORCHELASTIC_RUN_ID", "SM_CURRENT_HOST", "SM_MASTER_ADDR", "SM_CURRENT_HOST_RANK"]
out = {k: os.environ.get(k) for k in keys}
out.update(sum=t.item(), dist_rank=rank, dist_world=world, argv=sys.argv[1:])
with open(os.path.join(os.environ["SM_MODEL_DIR"], f"rank-{rank}.json"), "w") as f:
    json.dump(out, f)
print(f"rank {rank} sum={t.item()}", flush=True)
dist.barrier()
dist.destroy_process_group()
"""


@pytest.mark.slow
def test_two_hosts_two_ranks_all_reduce_over_gloo(job: Path) -> None:
    pytest.importorskip("torch")
    src = write_code(job, DDP)
    hosts = ["algo-1", "algo-2"]
    hps = script_hps(
        src,
        {
            "epochs": "1",
            contract.HP_TORCH_DISTRIBUTED_ENABLED: "true",
            contract.HP_INSTANCE_TYPE: '"ml.g5.12xlarge"',
        },
    )
    port = free_port()
    shared = {
        contract.SMLAUNCH_HOST_ADDRESSES: json.dumps({h: "127.0.0.1" for h in hosts}),
        contract.SMLAUNCH_MASTER_PORT: str(port),
        contract.SMLAUNCH_PROCESSES_PER_HOST: "2",
        contract.TRAINING_JOB_NAME_ENV: "ddp-job",
    }
    trees = {h: write_host_tree(job / h, h, hosts, hps, instance_type="ml.g5.12xlarge") for h in hosts}
    runs = {h: HostRun(job / h, shared) for h in hosts}
    codes = {h: run.wait(120) for h, run in runs.items()}
    assert codes == {"algo-1": 0, "algo-2": 0}, "\n".join(r.output for r in runs.values())
    seen = {}
    for h, paths in trees.items():
        for f in paths.model_dir.glob("rank-*.json"):
            seen[f.name] = (h, json.loads(f.read_text()))
    assert sorted(seen) == ["rank-0.json", "rank-1.json", "rank-2.json", "rank-3.json"]
    for rank in range(4):
        host, info = seen[f"rank-{rank}.json"]
        assert host == hosts[rank // 2]
        assert info["sum"] == 10.0
        assert (info["dist_rank"], info["dist_world"]) == (rank, 4)
        assert info["RANK"] == str(rank) and info["LOCAL_RANK"] == str(rank % 2)
        assert info["WORLD_SIZE"] == "4" and info["LOCAL_WORLD_SIZE"] == "2"
        assert info["NODE_RANK"] == info["GROUP_RANK"] == info["SM_CURRENT_HOST_RANK"] == str(rank // 2)
        assert info["MASTER_ADDR"] == info["SM_MASTER_ADDR"] == "127.0.0.1"
        assert info["MASTER_PORT"] == str(port)
        assert info["TORCHELASTIC_RUN_ID"] == "ddp-job"
        assert info["SM_CURRENT_HOST"] == host
        assert info["argv"] == ["--epochs", "1"]
    assert "[algo-2/rank 3] rank 3 sum=10.0" in runs["algo-2"].output
    assert "[algo-1] launcher: torchrun, ranks 0-1 of 4 on host 1 of 2, gloo" in runs["algo-1"].output
    for paths in trees.values():
        assert paths.success_file.exists()


CRASH = r"""
import os, sys, time, traceback
rank = int(os.environ["RANK"])
print(f"rank {rank} ready", flush=True)
if rank == 1:
    time.sleep(0.5)
    def inner():
        raise ValueError("boom on rank 1")
    try:
        inner()
    except ValueError:
        traceback.print_exc()
    sys.exit(3)
time.sleep(120)
"""


def test_rank_exit_code_is_the_host_exit_code_and_the_failure_names_it(job: Path) -> None:
    src = write_code(job, CRASH)
    hps = script_hps(src, {contract.HP_TORCH_DISTRIBUTED_ENABLED: "true"})
    paths = write_host_tree(job / "algo-1", "algo-1", ["algo-1"], hps)
    host = HostRun(
        job / "algo-1",
        {contract.SMLAUNCH_PROCESSES_PER_HOST: "2", contract.SMLAUNCH_MASTER_PORT: str(free_port())},
    )
    assert host.wait(30) == 3, host.output
    failure = paths.failure_file.read_text()
    assert failure.startswith("AlgorithmError: rank 1 on host algo-1 exited with code 3")
    assert "ErrorMessage: ValueError: boom on rank 1" in failure
    assert "Traceback (most recent call last):" in failure and 'raise ValueError("boom on rank 1")' in failure
    details = json.loads((paths.output_dir / contract.FAILURE_DETAILS_FILE).read_text())
    assert details["host"] == "algo-1" and details["rank"] == 1 and details["exit_code"] == 3
    assert details["kind"] == "failed" and details["reason"] == failure and details["time"] > 0
    assert not paths.success_file.exists()
    assert "[algo-1/rank 1] ValueError: boom on rank 1" in host.output


def test_user_written_failure_file_wins(job: Path) -> None:
    src = write_code(
        job,
        "import os, sys\nopen(os.environ['SM_OUTPUT_DIR'] + '/failure', 'w').write('my reason')\n"
        "sys.exit(2)\n",
    )
    paths = write_host_tree(job / "algo-1", "algo-1", ["algo-1"], script_hps(src))
    host = HostRun(job / "algo-1", {})
    assert host.wait() == 2, host.output
    assert paths.failure_file.read_text() == "my reason"
    assert json.loads((paths.output_dir / contract.FAILURE_DETAILS_FILE).read_text())["reason"] == "my reason"


STOPPABLE = r"""
import os, signal, sys, time
rank = os.environ["RANK"]
def on_term(signum, frame):
    open(os.path.join(os.environ["SM_MODEL_DIR"], f"sigterm-{rank}"), "w").write("checkpoint")
    if rank == "0":
        sys.exit(0)          # rank 0 checkpoints and leaves
    # rank 1 ignores the stop: the runtime must SIGKILL it after the grace period
signal.signal(signal.SIGTERM, on_term)
print(f"rank {rank} ready", flush=True)
while True:
    time.sleep(0.1)
"""


def test_sigterm_reaches_every_rank_then_sigkill_after_the_grace(job: Path) -> None:
    src = write_code(job, STOPPABLE)
    hps = script_hps(src, {contract.HP_TORCH_DISTRIBUTED_ENABLED: "true"})
    paths = write_host_tree(job / "algo-1", "algo-1", ["algo-1"], hps)
    host = HostRun(
        job / "algo-1",
        {
            contract.SMLAUNCH_PROCESSES_PER_HOST: "2",
            contract.SMLAUNCH_STOP_GRACE_SECONDS: "1",
            contract.SMLAUNCH_MASTER_PORT: str(free_port()),
        },
    )
    host.wait_for("ready", count=2)
    host.popen.send_signal(signal.SIGTERM)
    assert host.wait(30) == 128 + signal.SIGTERM, host.output
    assert (paths.model_dir / "sigterm-0").read_text() == "checkpoint"
    assert (paths.model_dir / "sigterm-1").exists()
    assert "SIGKILL to 1 process(es)" in host.output
    details = json.loads((paths.output_dir / contract.FAILURE_DETAILS_FILE).read_text())
    assert details["kind"] == "stopped" and details["exit_code"] == 143
    assert paths.failure_file.read_text().startswith("Stopped: host algo-1 received SIGTERM")


def test_ranks_die_with_a_sigkilled_runtime(job: Path) -> None:
    src = write_code(job, "import time\nprint('rank ready', flush=True)\ntime.sleep(120)\n")
    write_host_tree(job / "algo-1", "algo-1", ["algo-1"], script_hps(src))
    host = HostRun(job / "algo-1", {})
    host.wait_for("rank ready")
    assert processes_under(job / "algo-1")
    host.popen.send_signal(signal.SIGKILL)
    assert host.wait(10) == -signal.SIGKILL
    # the fixture checks that the rank (PR_SET_PDEATHSIG) is gone too


def test_tarball_with_parent_entries_is_refused(job: Path) -> None:
    tarball = job / "sourcedir.tar.gz"
    with tarfile.open(tarball, "w:gz") as tar:
        for name, data in (("train.py", b"print('should not run')\n"), ("../escaped.py", b"x = 1\n")):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    hps = {contract.HP_PROGRAM: '"train.py"', contract.HP_SUBMIT_DIRECTORY: json.dumps(f"file://{tarball}")}
    paths = write_host_tree(job / "ml", "algo-1", ["algo-1"], hps)
    host = HostRun(job / "ml", {})
    assert host.wait() == 1, host.output
    failure = paths.failure_file.read_text()
    assert failure.startswith("ClientError:") and "../escaped.py" in failure
    assert not (job / "ml" / "escaped.py").exists() and not (paths.code_dir / "train.py").exists()
    assert "should not run" not in host.output
    assert json.loads((paths.output_dir / contract.FAILURE_DETAILS_FILE).read_text())["exit_code"] == 1


def test_a_script_that_raises_on_every_rank_reports_one_root_cause(job: Path) -> None:
    src = write_code(job, "import os\nraise RuntimeError(f\"broken on rank {os.environ['RANK']}\")\n")
    hps = script_hps(src, {contract.HP_TORCH_DISTRIBUTED_ENABLED: "true"})
    paths = write_host_tree(job / "algo-1", "algo-1", ["algo-1"], hps)
    host = HostRun(job / "algo-1", {contract.SMLAUNCH_PROCESSES_PER_HOST: "2"})
    assert host.wait() == 1, host.output
    details = json.loads((paths.output_dir / contract.FAILURE_DETAILS_FILE).read_text())
    assert details["rank"] in (0, 1) and details["exit_code"] == 1
    assert f"ErrorMessage: RuntimeError: broken on rank {details['rank']}" in details["reason"]
    assert details["reason"].count("Traceback (most recent call last):") == 1


def test_a_missing_resource_config_is_a_client_error(job: Path) -> None:
    src = write_code(job, "print('never')\n")
    paths = write_host_tree(job / "ml", "algo-1", ["algo-1"], script_hps(src))
    paths.resource_config_file.unlink()
    host = HostRun(job / "ml", {})
    assert host.wait() == 1, host.output
    failure = paths.failure_file.read_text()
    assert (
        failure.startswith("ClientError: ")
        and "resourceconfig.json" in failure
        and "file is missing" in failure
    )
    assert "never" not in host.output
