"""The ``sm_drivers`` channel of a ModelTrainer job, and staging a local tree to its URI.

As SDK v3's, the channel holds ``sourcecode.json`` and ``distributed.json`` (the configs'
``model_dump()``), and ``sm_train.sh``, the bash script the container starts with (v3's template:
echo the config, render the variables, ``cd`` into the code, install the requirements, run). Its
Python driver is ours, :mod:`smlaunch.contract.v3` as ``sm_driver.py``: standard library only, so
the job runs in any image with bash and Python. Where smlaunch's runtime is the host (the emulated
platform, our images), the runtime reads the two JSON files itself and gives the job the same
contract (:mod:`smlaunch.runtime.v3`).
"""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote, urlparse

from smlaunch.contract import v3 as v3_contract

if TYPE_CHECKING:
    from smlaunch.sdk.sessions.protocol import TrainingSession
    from smlaunch.sdk.train.configs import SourceCode
    from smlaunch.sdk.train.distributed import DistributedConfig

_DRIVER = f'$SM_PYTHON_CMD "$SM_BASE/input/data/{v3_contract.DRIVERS_CHANNEL}/{v3_contract.DRIVER_SCRIPT}"'

TRAIN_SCRIPT = """#!/bin/bash
set -e
echo "Starting training script"
# /opt/ml in a container; SAGEMAKER_BASE_DIR where smlaunch emulates a host's tree elsewhere.
SM_BASE="${{SAGEMAKER_BASE_DIR:-/opt/ml}}"

handle_error() {{
    EXIT_STATUS=$?
    echo "An error occurred with exit code $EXIT_STATUS"
    if [ ! -s "$SM_BASE/output/failure" ]; then
        echo "Training Execution failed. TrainingJob - $TRAINING_JOB_NAME" >> "$SM_BASE/output/failure"
    fi
    exit $EXIT_STATUS
}}

trap 'handle_error' ERR

SM_PYTHON_CMD=$(command -v python3 || command -v python)
if [[ -z "$SM_PYTHON_CMD" ]]; then
    echo "Error: The Python executable was not found in the system path."
    exit 1
fi

set -x
$SM_PYTHON_CMD --version
cat "$SM_BASE/input/config/resourceconfig.json"
cat "$SM_BASE/input/config/inputdataconfig.json"

echo "Setting up environment variables"
{driver} env
set +x
source "$SM_BASE/input/{env_file}"
set -x

{working_dir}
{install_requirements}
{execute}

echo "Training Container Execution Completed"
"""

EXECUTE_COMMAND = """CMD=$(cat <<'SAGEMAKER_BASE_COMMAND_EOF'
{command}
SAGEMAKER_BASE_COMMAND_EOF
)
echo "Executing command: $CMD"
eval "$CMD"
"""


def train_script(source_code: SourceCode, distributed: DistributedConfig | None) -> str:
    """``sm_train.sh`` for this code: v3's steps, its ``command`` quoting (``args`` shell-quoted)."""
    import shlex

    working_dir = f'cd "$SM_BASE/input/data/{v3_contract.CODE_CHANNEL}"' if source_code.source_dir else ""
    install = ""
    if source_code.requirements:
        install = f"$SM_PYTHON_CMD -m pip install -r {shlex.quote(source_code.requirements)}"
    if source_code.command:
        parts = source_code.command.split() + [shlex.quote(str(a)) for a in source_code.args or []]
        execute = EXECUTE_COMMAND.format(command=" ".join(parts))
    else:
        name = type(distributed).__name__ if distributed is not None else "Basic Script"
        execute = f'echo "Running {name} Driver"\n{_DRIVER} run'
    return TRAIN_SCRIPT.format(
        driver=_DRIVER,
        env_file=v3_contract.ENV_FILE,
        working_dir=working_dir,
        install_requirements=install,
        execute=execute,
    )


def driver_files(source_code: SourceCode, distributed: DistributedConfig | None) -> dict[str, bytes]:
    """The drivers channel's files: name -> content."""
    dump: dict[str, Any] = distributed.model_dump() if distributed is not None else {}
    return {
        v3_contract.SOURCE_CODE_JSON: json.dumps(source_code.model_dump()).encode(),
        v3_contract.DISTRIBUTED_JSON: json.dumps(dump).encode(),
        v3_contract.TRAIN_SCRIPT: train_script(source_code, distributed).encode(),
        v3_contract.DRIVER_SCRIPT: Path(v3_contract.__file__).read_bytes(),
    }


def digest(files: dict[str, bytes]) -> str:
    """A short content hash of ``files`` (names a shared local copy of them)."""
    import hashlib

    hasher = hashlib.sha256()
    for name in sorted(files):
        hasher.update(name.encode() + b"\0" + hashlib.sha256(files[name]).digest())
    return hasher.hexdigest()[:20]


def write_drivers(directory: Path, files: dict[str, bytes]) -> None:
    """Write ``files`` into ``directory`` (``sm_train.sh`` executable)."""
    directory.mkdir(parents=True, exist_ok=True)
    for name, content in files.items():
        (directory / name).write_bytes(content)
    (directory / v3_contract.TRAIN_SCRIPT).chmod(0o755)


def local_drivers_dir(store: Path, files: dict[str, bytes]) -> Path:
    """Where a local job's drivers lie: ``sm_drivers/<content hash>`` beside the job store (a job
    may not read inside the store), shared by every job with the same files, never changed."""
    return store.parent / v3_contract.DRIVERS_CHANNEL / digest(files)


def ensure_local_drivers(directory: Path, files: dict[str, bytes]) -> None:
    """Write the shared drivers directory once (a rename into place: readers never see half)."""
    if directory.is_dir():
        return
    directory.parent.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix=".writing-", dir=directory.parent))
    write_drivers(scratch, files)
    scratch.chmod(0o755)
    try:
        scratch.rename(directory)
    except OSError:  # another job wrote it first: the same files
        shutil.rmtree(scratch, ignore_errors=True)


def stage_tree(
    session: TrainingSession, source: Path, uri: str, ignore_patterns: tuple[str, ...] = ()
) -> None:
    """Put the tree ``source`` (less ``ignore_patterns``) at ``uri``: ``file://`` by copying,
    ``s3://`` by uploading (KMS-encrypted, as the SDK uploads code)."""
    ignore = shutil.ignore_patterns(*ignore_patterns) if ignore_patterns else None
    parsed = urlparse(uri)
    if parsed.scheme == "file":
        destination = Path(unquote(parsed.path))
        if destination.exists():
            shutil.rmtree(destination)
        if source.is_dir():
            shutil.copytree(source, destination, ignore=ignore)
        else:
            destination.mkdir(parents=True)
            shutil.copy2(source, destination / source.name)
        return
    from smlaunch.contract.transfer.engine import TransferEngine

    extra_args = {"ServerSideEncryption": "aws:kms", **session.bucket_owner_args(parsed.netloc)}
    with tempfile.TemporaryDirectory() as scratch:
        tree = Path(scratch) / "tree"
        if source.is_dir():
            shutil.copytree(source, tree, ignore=ignore)
        else:  # one file: uploaded below the channel's prefix, as the SDK uploads it
            tree.mkdir()
            shutil.copy2(source, tree / source.name)
        with TransferEngine(s3_client=session.s3_client()) as engine:
            engine.upload_dir(tree, uri.rstrip("/") + "/", extra_args=extra_args)
