"""SDK v3's container contract (``ModelTrainer`` jobs): its names, the environment its drivers give
the script, and the command they run it with.

SDK v3 does not use the training toolkit. It uploads its drivers as an extra channel
(``sm_drivers``: ``sourcecode.json``, ``distributed.json``, the bash entry script ``sm_train.sh`` and
Python driver scripts), the code as the ``code`` channel, and starts the container with
``/bin/bash -c "chmod +x .../sm_train.sh && .../sm_train.sh"``. ``sm_train.sh`` renders the variables
below into ``/opt/ml/input/sm_training.env``, sources it, ``cd``s into the code channel, installs
``requirements`` and runs the command (``SourceCode.command`` through ``eval``; an entry script
directly; with ``Torchrun``, ``torchrun`` with the node's rank; with ``MPI``, ``mpirun``).

Two readers: the host runtime (:mod:`smlaunch.runtime.environment` gives a ModelTrainer job exactly
this environment) and the container itself: the SDK uploads this very file as
``sm_drivers/sm_driver.py`` of a job it sends to SageMaker, so that job runs in any image with bash
and Python, as v3's do. Hence the rule of this module: the standard library only, and nothing of ours.

Values are rendered as v3's ``environment.py`` renders them (``safe_serialize``: strings as they
are, anything else JSON), and read as its drivers read them (``safe_deserialize``).
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from collections.abc import Mapping
from typing import Any

CODE_CHANNEL = "code"
DRIVERS_CHANNEL = "sm_drivers"
SOURCE_CODE_JSON = "sourcecode.json"
DISTRIBUTED_JSON = "distributed.json"
TRAIN_SCRIPT = "sm_train.sh"
DRIVER_SCRIPT = "sm_driver.py"
"""What this file is called in the ``sm_drivers`` channel of a job sent to SageMaker."""
ENV_FILE = "sm_training.env"
"""Below ``input/``: the variables ``sm_train.sh`` sources."""
DRIVERS_CONTAINER_PATH = "/opt/ml/input/data/sm_drivers"
CODE_CONTAINER_PATH = "/opt/ml/input/data/code"
CONTAINER_ENTRYPOINT = ["/bin/bash"]
CONTAINER_ARGUMENTS = [
    "-c",
    f"chmod +x {DRIVERS_CONTAINER_PATH}/{TRAIN_SCRIPT} && {DRIVERS_CONTAINER_PATH}/{TRAIN_SCRIPT}",
]
"""``AlgorithmSpecification.ContainerEntrypoint`` / ``ContainerArguments`` of every v3 job with code."""
MASTER_ADDR = "algo-1"
"""v3's drivers name the first host the master, whatever the hosts are."""
MASTER_PORT = 7777
SMLAUNCH_MASTER_PORT = "SMLAUNCH_MASTER_PORT"
"""Where smlaunch runs this driver, the rendezvous port it picked (``smlaunch.contract``'s name)."""
DEFAULT_LOG_LEVEL = 20


def safe_serialize(data: Any) -> str:
    """A string as it is, anything else as JSON (``str()`` where JSON cannot encode it)."""
    if isinstance(data, str):
        return data
    try:
        return json.dumps(data)
    except TypeError:
        return str(data)


def safe_deserialize(data: Any) -> Any:
    """JSON decoded where the string is JSON, else the string itself (a non-string as it is)."""
    if not isinstance(data, str):
        return data
    try:
        return json.loads(data)
    except json.JSONDecodeError:
        return data


def hyperparameters_to_cli_args(hyperparameters: Mapping[str, Any]) -> list[str]:
    """``--key value`` for every hyperparameter, in order, values re-serialized."""
    args: list[str] = []
    for key, value in hyperparameters.items():
        args.extend([f"--{key}", safe_serialize(safe_deserialize(value))])
    return args


def environment(
    base_dir: str,
    resource_config: Mapping[str, Any],
    input_data_config: Mapping[str, Any],
    hyperparameters: Mapping[str, Any],
    source_code: Mapping[str, Any],
    distributed: Mapping[str, Any],
    *,
    job_name: str,
    num_cpus: int,
    num_gpus: int,
    num_neurons: int,
    log_level: Any = DEFAULT_LOG_LEVEL,
    master_addr: str = MASTER_ADDR,
    master_port: int = MASTER_PORT,
) -> dict[str, str]:
    """The variables v3's ``environment.py`` writes for the script, rendered as strings.

    ``base_dir`` is ``/opt/ml`` in a container (an emulated host's tree elsewhere); ``hyperparameters``
    are ``hyperparameters.json``'s strings; ``source_code`` and ``distributed`` the two JSON files.
    """
    base = base_dir.rstrip("/") or "/"
    input_dir, output_dir = f"{base}/input", f"{base}/output"
    data_dir, config_dir = f"{input_dir}/data", f"{input_dir}/config"
    env: dict[str, Any] = {
        "SM_MODEL_DIR": f"{base}/model",
        "SM_INPUT_DIR": input_dir,
        "SM_INPUT_DATA_DIR": data_dir,
        "SM_INPUT_CONFIG_DIR": config_dir,
        "SM_OUTPUT_DIR": output_dir,
        "SM_OUTPUT_FAILURE": f"{output_dir}/failure",
        "SM_OUTPUT_DATA_DIR": f"{output_dir}/data",
        "SM_LOG_LEVEL": log_level,
        "SM_MASTER_ADDR": master_addr,
        "SM_MASTER_PORT": master_port,
    }
    if source_code:
        env["SM_SOURCE_DIR"] = f"{data_dir}/{CODE_CHANNEL}"
        env["SM_ENTRY_SCRIPT"] = source_code.get("entry_script", "")
    if distributed:
        env["SM_DISTRIBUTED_DRIVER_DIR"] = f"{data_dir}/{DRIVERS_CHANNEL}/distributed_drivers"
        env["SM_DISTRIBUTED_CONFIG"] = dict(distributed)
    channels = list(input_data_config)
    for channel in channels:
        env[f"SM_CHANNEL_{channel.upper()}"] = f"{data_dir}/{channel}"
    env["SM_CHANNELS"] = channels
    hps = {key: safe_deserialize(value) for key, value in hyperparameters.items()}
    for key, value in hps.items():
        env[f"SM_HP_{key.replace('-', '_').upper()}"] = value
    env["SM_HPS"] = hps
    current_host = resource_config["current_host"]
    hosts = sorted(resource_config["hosts"])
    env["SM_CURRENT_HOST"] = current_host
    env["SM_CURRENT_INSTANCE_TYPE"] = resource_config["current_instance_type"]
    env["SM_HOSTS"] = hosts
    env["SM_NETWORK_INTERFACE_NAME"] = resource_config["network_interface_name"]
    env["SM_HOST_COUNT"] = len(hosts)
    env["SM_CURRENT_HOST_RANK"] = hosts.index(current_host)
    env["SM_NUM_CPUS"] = num_cpus
    env["SM_NUM_GPUS"] = num_gpus
    env["SM_NUM_NEURONS"] = num_neurons
    env["SM_RESOURCE_CONFIG"] = dict(resource_config)
    env["SM_INPUT_DATA_CONFIG"] = dict(input_data_config)
    env["SM_TRAINING_ENV"] = {
        "channel_input_dirs": {channel: env[f"SM_CHANNEL_{channel.upper()}"] for channel in channels},
        "current_host": current_host,
        "current_instance_type": env["SM_CURRENT_INSTANCE_TYPE"],
        "hosts": hosts,
        "master_addr": master_addr,
        "master_port": master_port,
        "hyperparameters": hps,
        "input_data_config": dict(input_data_config),
        "input_config_dir": config_dir,
        "input_data_dir": data_dir,
        "input_dir": input_dir,
        "job_name": job_name,
        "log_level": log_level,
        "model_dir": env["SM_MODEL_DIR"],
        "network_interface_name": env["SM_NETWORK_INTERFACE_NAME"],
        "num_cpus": num_cpus,
        "num_gpus": num_gpus,
        "num_neurons": num_neurons,
        "output_data_dir": env["SM_OUTPUT_DATA_DIR"],
        "resource_config": dict(resource_config),
    }
    return {key: safe_serialize(value) for key, value in env.items()}


def process_count(configured: Any, num_gpus: int, num_neurons: int) -> int:
    """Ranks per host: ``process_count_per_node``, else the GPUs, else the Neuron cores, else 1."""
    return int(configured or 0) or num_gpus or num_neurons or 1


def script_command(entry_script: str, hyperparameters: Mapping[str, Any], python: str) -> list[str]:
    """How v3's basic driver runs an entry script (a ``.py`` or ``.sh``), hyperparameters as flags."""
    args = hyperparameters_to_cli_args(hyperparameters)
    if entry_script.endswith(".py"):
        return [python, entry_script, *args]
    if entry_script.endswith(".sh"):
        quoted = " ".join(shlex.quote(arg) for arg in args)
        return ["/bin/sh", "-c", f"chmod +x {entry_script} && ./{entry_script} {quoted}"]
    raise ValueError(f"Unsupported entry script type: {entry_script}. Only .py and .sh are supported.")


def torchrun_command(environ: Mapping[str, str], distributed: Mapping[str, Any]) -> list[str]:
    """v3's torchrun driver's command: ``torchrun --nnodes --nproc_per_node`` (and the master and this
    node's rank when there are several hosts), the entry script, the hyperparameters."""
    nproc = process_count(
        distributed.get("process_count_per_node"),
        int(environ.get("SM_NUM_GPUS", 0)),
        int(environ.get("SM_NUM_NEURONS", 0)),
    )
    hosts = int(environ["SM_HOST_COUNT"])
    command = ["torchrun", f"--nnodes={hosts}", f"--nproc_per_node={nproc}"]
    if hosts > 1:
        command += [
            f"--master_addr={environ['SM_MASTER_ADDR']}",
            f"--master_port={environ['SM_MASTER_PORT']}",
            f"--node_rank={environ['SM_CURRENT_HOST_RANK']}",
        ]
    command.append(environ["SM_ENTRY_SCRIPT"])
    return command + hyperparameters_to_cli_args(json.loads(environ["SM_HPS"]))


def _read_json(path: str) -> dict[str, Any]:
    try:
        with open(path) as handle:
            return json.load(handle) or {}
    except FileNotFoundError:
        return {}


def _gpus() -> int:
    try:
        output = subprocess.check_output(["nvidia-smi", "--list-gpus"]).decode()
    except (OSError, subprocess.CalledProcessError):
        return 0
    return sum(1 for line in output.splitlines() if line.startswith("GPU "))


def main(argv: list[str]) -> int:
    """In a container: ``env`` writes ``input/sm_training.env``; ``run`` runs the job's command."""
    base = os.environ.get("SAGEMAKER_BASE_DIR", "/opt/ml")
    drivers = f"{base}/input/data/{DRIVERS_CHANNEL}"
    source_code = _read_json(f"{drivers}/{SOURCE_CODE_JSON}")
    distributed = _read_json(f"{drivers}/{DISTRIBUTED_JSON}")
    if argv[:1] == ["env"]:
        config = f"{base}/input/config"
        env = environment(
            base,
            _read_json(f"{config}/resourceconfig.json"),
            _read_json(f"{config}/inputdataconfig.json"),
            _read_json(f"{config}/hyperparameters.json"),
            source_code,
            distributed,
            job_name=os.environ.get("TRAINING_JOB_NAME", ""),
            num_cpus=os.cpu_count() or 1,
            num_gpus=_gpus(),
            num_neurons=0,
            log_level=os.environ.get("SM_LOG_LEVEL", DEFAULT_LOG_LEVEL),
            # smlaunch's Docker executor runs this in images without its runtime, the containers
            # sharing the machine's network: the port it picked free, not 7777. (SMLAUNCH_*
            # variables never reach SageMaker, where v3's port stands.)
            master_port=int(os.environ.get(SMLAUNCH_MASTER_PORT) or MASTER_PORT),
        )
        with open(f"{base}/input/{ENV_FILE}", "w") as handle:
            handle.writelines(f"export {key}={shlex.quote(value)}\n" for key, value in env.items())
        return 0
    if argv[:1] == ["run"]:
        if "mpi_additional_options" in distributed:
            # mpirun needs sshd between the hosts: smlaunch's runtime (in its images) brings it.
            import shutil

            runtime = shutil.which("smlaunch-train")
            if runtime is None:
                print("MPI jobs need smlaunch's runtime (smlaunch-train) in the image", file=sys.stderr)
                return 1
            return subprocess.call([runtime])
        if distributed:
            command = torchrun_command(os.environ, distributed)
        else:
            hps = json.loads(os.environ.get("SM_HPS", "{}"))
            command = script_command(os.environ["SM_ENTRY_SCRIPT"], hps, sys.executable)
        print(f"Executing command: {' '.join(command)}", flush=True)
        code = subprocess.call(command)
        if code != 0 and not os.path.exists(f"{base}/output/failure"):
            with open(f"{base}/output/failure", "w") as handle:
                handle.write(f"Command {command[0]} exited with code {code}")
        return code
    print(f"usage: {DRIVER_SCRIPT} env|run", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
