"""A ModelTrainer's argument checks: v3's own (``_validate_source_code``,
``_validate_distributed_config``, the image) and smlaunch's (what a platform cannot run), each a
:class:`~smlaunch.sdk.errors.ConfigurationError` (a ``ValueError``, as v3's are) naming the argument,
the value and the fix, raised at construction or at ``train()`` before anything is staged."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from smlaunch.contract import v3 as v3_contract
from smlaunch.sdk.errors import ConfigurationError, require_type
from smlaunch.sdk.inputs import validate_channel_name
from smlaunch.sdk.train import configs
from smlaunch.sdk.train.distributed import MPI, DistributedConfig, Torchrun

M = TypeVar("M", bound=BaseModel)


def config(field: str, value: Any, kind: type[M]) -> M | None:
    """``value`` as a ``kind`` (a dict is validated into one, as pydantic does for v3), or None."""
    if value is None or isinstance(value, kind):
        return value
    if isinstance(value, Mapping):
        try:
            return kind.model_validate(dict(value))
        except ValidationError as error:
            first = error.errors()[0]
            where = ".".join(str(p) for p in first["loc"])
            raise ConfigurationError(
                f"{field}.{where}", first.get("input"), first["msg"], f"see {kind.__name__}'s fields"
            ) from None
    raise ConfigurationError(field, value, f"must be a {kind.__name__}", f"pass {field}={kind.__name__}(...)")


def source_code(value: configs.SourceCode | None, local: bool) -> None:
    """v3's checks of ``source_code`` (a local ``source_dir`` holds the files it names)."""
    if value is None:
        return
    if not value.command and not value.entry_script:
        raise ConfigurationError(
            "source_code",
            value,
            "names neither an entry_script nor a command",
            "pass SourceCode(source_dir=..., entry_script='train.py') or SourceCode(command='...')",
        )
    directory = value.source_dir
    if (value.requirements or value.entry_script) and not directory:
        raise ConfigurationError(
            "source_code.source_dir",
            None,
            "requirements and entry_script are files of source_dir",
            "pass SourceCode(source_dir='src', ...)",
        )
    if directory and directory.endswith(".tar.gz"):
        raise ConfigurationError(
            "source_code.source_dir",
            directory,
            "a .tar.gz source is not supported by smlaunch",
            "pass the directory it was made from (or its s3:// prefix)",
        )
    if directory and "://" not in directory:
        root = Path(directory).expanduser()
        if not root.is_dir():
            raise ConfigurationError(
                "source_code.source_dir", directory, "no such directory", "pass an existing local directory"
            )
        for name in ("entry_script", "requirements"):
            file = getattr(value, name)
            if file and not (root / file).is_file():
                raise ConfigurationError(
                    f"source_code.{name}", file, f"no such file in {directory}", "name a file of source_dir"
                )
    elif directory and not directory.startswith("s3://"):
        raise ConfigurationError(
            "source_code.source_dir", directory, "must be a local directory or an s3:// prefix", "pass one"
        )
    entry = value.entry_script
    if entry and not value.command and not entry.endswith((".py", ".sh")):
        raise ConfigurationError(
            "source_code.entry_script", entry, "only .py and .sh scripts are supported", "rename it"
        )
    if local and value.requirements and value.requirements != "requirements.txt":
        raise ConfigurationError(
            "source_code.requirements",
            value.requirements,
            "local runs install requirements from requirements.txt only",
            "name the file requirements.txt",
        )


def distributed(value: Any, code: configs.SourceCode | None) -> DistributedConfig | None:
    """``Torchrun`` or ``MPI``; it needs an entry script (v3's rule)."""
    if value is None:
        return None
    if not isinstance(value, (Torchrun, MPI)):
        raise ConfigurationError(
            "distributed", value, "must be Torchrun(...) or MPI(...)", "pass distributed=Torchrun()"
        )
    if code is None or not code.entry_script:
        raise ConfigurationError(
            "distributed",
            value,
            "a distributed job runs source_code.entry_script",
            "pass SourceCode(source_dir=..., entry_script='train.py')",
        )
    return value


def hyperparameters(value: Any) -> dict[str, Any]:
    """A dict, or the path of a JSON (or YAML) file holding one, as v3 reads it."""
    if value is None:
        return {}
    if isinstance(value, str):
        path = Path(value).expanduser()
        if not path.is_file():
            raise ConfigurationError(
                "hyperparameters", value, "no such file", "pass a dict, or the path of a JSON or YAML file"
            )
        text = path.read_text()
        try:
            loaded = json.loads(text)
        except json.JSONDecodeError:
            try:
                import yaml

                loaded = yaml.safe_load(text)
            except Exception:
                loaded = None
        if not isinstance(loaded, dict):
            raise ConfigurationError(
                "hyperparameters",
                value,
                "is not a JSON or YAML mapping",
                "write a mapping of names to values",
            )
        return loaded
    require_type("hyperparameters", value, dict, "pass a dict of hyperparameters")
    return dict(value)


def environment(value: Any) -> dict[str, str]:
    if value is None:
        return {}
    require_type("environment", value, dict, "pass a dict of variable names to strings")
    for key, item in value.items():
        require_type(f"environment[{key!r}]", item, str, "pass every value as a string")
    return dict(value)


def inputs(
    value: Any, source: configs.SourceCode | None, field: str = "input_data_config"
) -> list[configs.InputData | configs.Channel]:
    """A list of ``InputData`` / ``Channel``; names valid, none of the SDK's own channels when the job
    has code; a local path exists."""
    if value is None:
        return []
    require_type(field, value, list, "pass a list of InputData(channel_name=..., data_source=...)")
    checked: list[configs.InputData | configs.Channel] = []
    reserved = {v3_contract.CODE_CHANNEL, v3_contract.DRIVERS_CHANNEL} if source is not None else set()
    for index, item in enumerate(value):
        if not isinstance(item, (configs.InputData, configs.Channel)):
            raise ConfigurationError(
                f"{field}[{index}]",
                item,
                "must be InputData or Channel",
                "pass InputData(channel_name, data_source)",
            )
        validate_channel_name(item.channel_name, f"{field}[{index}].channel_name")
        if item.channel_name in reserved:
            raise ConfigurationError(
                f"{field}[{index}].channel_name",
                item.channel_name,
                "is the channel the SDK gives the job's code or drivers",
                "rename your channel",
            )
        source_value = getattr(item, "data_source", None)
        if isinstance(source_value, str) and "://" not in source_value:
            if not Path(source_value).expanduser().exists():
                raise ConfigurationError(
                    f"{field}[{index}].data_source",
                    source_value,
                    "no such file or directory",
                    "pass an existing local path or an s3:// URI",
                )
        checked.append(item)
    return checked
