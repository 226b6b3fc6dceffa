"""SDK v3 (``sagemaker`` 3.x, ``sagemaker.train.ModelTrainer``) as an oracle, in a virtualenv of its
own: it cannot be installed beside SDK v2, which the other oracles use.

:func:`venv_python` makes the environment once (``python -m venv`` and ``pip install sagemaker
moto``) and caches it (``$SMLAUNCH_SDK_V3_VENV``, else ``~/.cache/smlaunch/sdk-v3-venv``); where it
cannot be made, the tests that need it are skipped with the reason. :func:`run_oracle` runs
:data:`ORACLE` there: for each case, the CreateTrainingJob request ``ModelTrainer.train()`` sends
under moto (and the ``sourcecode.json``/``distributed.json`` it uploads); and, for a host tree, the
variables v3's own ``environment.py`` writes and the command its basic driver runs.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

INSTALL_TIMEOUT_SECONDS = 900
SDK_V3 = "sagemaker==3.27.0"
"""The SDK v3 release the oracle is (pinned, as SDK v2's is in the test extra: a new release must not
change what the tests compare against unseen)."""


def venv_dir() -> Path:
    return Path(os.environ.get("SMLAUNCH_SDK_V3_VENV") or Path.home() / ".cache/smlaunch/sdk-v3-venv")


def _usable(python: Path) -> bool:
    version = SDK_V3.split("==")[1]
    probe = (
        "import importlib.metadata, sagemaker.train.model_trainer, moto; "
        f"assert importlib.metadata.version('sagemaker') == {version!r}"
    )
    try:
        return subprocess.run([str(python), "-c", probe], capture_output=True, timeout=300).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def venv_python() -> Path:
    """The v3 environment's Python, made (and cached) when missing; skips the test where it
    cannot be made (no network to the package index, no venv module)."""
    root = venv_dir()
    python = root / "bin" / "python"
    if python.exists() and _usable(python):
        return python
    try:
        subprocess.run(
            [sys.executable, "-m", "venv", str(root)], check=True, capture_output=True, timeout=300
        )
        subprocess.run(
            [str(python), "-m", "pip", "install", "-q", SDK_V3, "moto"],
            check=True,
            capture_output=True,
            timeout=INSTALL_TIMEOUT_SECONDS,
        )
    except (OSError, subprocess.SubprocessError) as error:
        detail = getattr(error, "stderr", b"") or b""
        pytest.skip(f"SDK v3's virtualenv at {root} cannot be made: {error} {detail[-300:]!r}")
    if not _usable(python):
        pytest.skip(f"SDK v3 is not importable in {root}")
    return python


def run_oracle(python: Path, payload: dict[str, Any], cwd: Path) -> dict[str, Any]:
    """Run :data:`ORACLE` with ``payload`` (JSON on stdin); its JSON answer."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_") and k != "PYTHONPATH"}
    done = subprocess.run(
        [str(python), "-c", ORACLE],
        input=json.dumps(payload),
        capture_output=True,
        text=True,
        cwd=cwd,
        env={**env, "SAGEMAKER_SUPPRESS_V2_WARNING": "1"},
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    answer: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return answer


ORACLE = r"""
import copy, json, os, sys
os.environ.update({"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
                   "AWS_DEFAULT_REGION": "us-west-2"})
payload = json.load(sys.stdin)
import logging
logging.disable(logging.CRITICAL)
import boto3, moto
from sagemaker.train import configs, distributed

def decode(value):
    if isinstance(value, dict) and len(value) == 1:
        (name, kwargs), = value.items()
        kind = getattr(configs, name, None) or getattr(distributed, name, None)
        if kind is not None:
            return kind(**{k: decode(v) for k, v in kwargs.items()})
    if isinstance(value, dict):
        return {k: decode(v) for k, v in value.items()}
    if isinstance(value, list):
        return [decode(v) for v in value]
    return value

out = {"requests": {}, "drivers": {}}
with moto.mock_aws():
    session_boto = boto3.Session(region_name="us-west-2")
    captured = []
    session_boto.events.register(
        "provide-client-params.sagemaker.CreateTrainingJob",
        lambda params, **_: captured.append(copy.deepcopy(params)),
    )
    import sagemaker.train.defaults as defaults
    # v3 validates the role with IAM's policy simulator, which moto lacks.
    defaults.TrainDefaults.get_role = staticmethod(lambda role=None, sagemaker_session=None: role)
    from sagemaker.core.helper.session_helper import Session
    from sagemaker.train import ModelTrainer
    session = Session(boto_session=session_boto)
    bucket = session.default_bucket()
    s3 = session_boto.client("s3")
    for name, case in payload.get("cases", {}).items():
        captured.clear()
        session.sagemaker_config = case.get("config") or {}  # config.yaml's defaults
        trainer = ModelTrainer(sagemaker_session=session, **decode(case["trainer"]))
        trainer.train(input_data_config=decode(case.get("inputs")), wait=False, logs=False)
        request = captured[-1]
        out["requests"][name] = request
        drivers = {}
        for channel in request.get("InputDataConfig") or []:
            if channel["ChannelName"] != "sm_drivers":
                continue
            prefix = channel["DataSource"]["S3DataSource"]["S3Uri"].split(bucket + "/", 1)[1]
            for file in ("sourcecode.json", "distributed.json"):
                body = s3.get_object(Bucket=bucket, Key=f"{prefix}/{file}")["Body"].read()
                drivers[file] = json.loads(body)
        out["drivers"][name] = drivers

tree = payload.get("tree")
if tree:
    import sagemaker.train.container_drivers as package
    sys.path.insert(0, os.path.dirname(package.__file__))
    from scripts import environment
    from common import utils
    from distributed_drivers import basic_script_driver
    drivers_dir = f"{tree}/input/data/sm_drivers"
    environment.read_source_code_json = lambda: utils.read_source_code_json(f"{drivers_dir}/sourcecode.json")
    environment.read_distributed_json = lambda: utils.read_distributed_json(f"{drivers_dir}/distributed.json")
    environment.num_cpus = lambda: 4
    environment.num_gpus = lambda: 0
    environment.num_neurons = lambda: 0
    os.environ["TRAINING_JOB_NAME"] = payload["job_name"]
    load = lambda f: json.load(open(f"{tree}/input/config/{f}"))
    env_file = f"{payload['scratch']}/sm_training.env"
    environment.set_env(load("resourceconfig.json"), load("inputdataconfig.json"),
                        load("hyperparameters.json"), output_file=env_file)
    variables = {}
    for line in open(env_file):
        key, _, value = line.rstrip("\n")[len("export "):].partition("=")
        variables[key] = value[1:-1]
    out["environment"] = variables
    os.environ.update(variables)
    out["command"] = basic_script_driver.create_commands() if variables.get("SM_ENTRY_SCRIPT") else None
print(json.dumps(out))
"""
