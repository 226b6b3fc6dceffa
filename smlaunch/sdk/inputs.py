"""Input channels: ``TrainingInput`` with SageMaker's fields, and ``fit(inputs)`` turned into
``InputDataConfig``.

``TrainingInput(...).config`` is the same dict as SDK v2's (``sagemaker.inputs.TrainingInput``),
``ChannelName`` excepted, so code that reads it keeps working. :func:`channels` accepts what
``fit()`` accepts: ``None``, a URI string or a ``TrainingInput`` (channel ``training``), or a dict
of channel name -> URI string / ``TrainingInput``. Checks here: channel names
(``[A-Za-z0-9\\.\\-_]+``, at most 64 characters, never ``.`` or ``..``), well-formed ``s3://`` and
``file://`` URIs, and that local paths exist. No other I/O.

Deliberate differences from the SDK:

- A local path without a scheme (``fit({"train": "data/train"})``): with a ``LocalSession``, an
  existing directory or file is used as ``file://<absolute path>``; the SDK refuses it (rule 45).
  With a SageMaker session it is an error that says to upload it or pass an ``s3://`` URI.
- ``file://`` inputs that do not exist fail here, not when the job starts.
- Enumerated fields (``distribution``, ``input_mode``, ...) are checked at construction.
- ``target_attribute_name`` is kept in ``.config`` like the SDK, but it is an AutoML field that
  CreateTrainingJob does not accept, so building a channel with it is an error.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

from smlaunch.sdk.errors import ConfigurationError
from smlaunch.sdk.request.naming import CHANNEL_NAME_PATTERN, refuse_nul
from smlaunch.sdk.request.spec import Channel

DEFAULT_CHANNEL = "training"
MAX_CHANNEL_NAME_CHARS = 64
BUCKET_PATTERN = re.compile(r"[a-z0-9][a-z0-9.\-]{1,61}[a-z0-9]")
"""S3 bucket names (a whole-string match: ``fullmatch``)."""

_CHOICES: dict[str, tuple[str, ...]] = {
    "distribution": ("FullyReplicated", "ShardedByS3Key"),
    "compression": ("None", "Gzip"),
    "record_wrapping": ("None", "RecordIO"),
    "s3_data_type": ("S3Prefix", "ManifestFile", "AugmentedManifestFile"),
    "input_mode": ("File", "FastFile", "Pipe"),
}


class ShuffleConfig:
    """Seed for shuffling S3 keys each epoch (``sagemaker.inputs.ShuffleConfig``)."""

    def __init__(self, seed: int) -> None:
        if not isinstance(seed, int) or isinstance(seed, bool):
            raise ConfigurationError("shuffle_config.seed", seed, "must be an integer", "pass e.g. 42")
        self.seed = seed


class TrainingInput:
    """One S3 (or local ``file://``) data channel, with SageMaker's fields and ``.config``.

    ``compression="Gzip"`` works in Pipe mode only, as on SageMaker: the objects are streamed
    decompressed. In File or FastFile mode it is refused when the job is checked, before anything
    is staged (SageMaker's CreateTrainingJob refuses it too).
    """

    def __init__(
        self,
        s3_data: str,
        distribution: str | None = None,
        compression: str | None = None,
        content_type: str | None = None,
        record_wrapping: str | None = None,
        s3_data_type: str = "S3Prefix",
        input_mode: str | None = None,
        attribute_names: list[str] | None = None,
        target_attribute_name: str | None = None,
        shuffle_config: ShuffleConfig | int | None = None,
    ) -> None:
        if not isinstance(s3_data, str) or not s3_data:
            raise ConfigurationError(
                "s3_data",
                s3_data,
                "must be a URI string",
                "pass e.g. 's3://bucket/prefix' or 'file:///data/train'",
            )
        refuse_nul(
            {
                "s3_data": s3_data,
                "content_type": content_type,
                "attribute_names": attribute_names,
                "target_attribute_name": target_attribute_name,
            }
        )
        given = {
            "distribution": distribution,
            "compression": compression,
            "record_wrapping": record_wrapping,
            "s3_data_type": s3_data_type,
            "input_mode": input_mode,
        }
        for name, value in given.items():
            if value is not None and value not in _CHOICES[name]:
                raise ConfigurationError(
                    name, value, "not a valid value", f"use one of {list(_CHOICES[name])}"
                )
        if attribute_names is not None and (
            not isinstance(attribute_names, list) or not all(isinstance(a, str) for a in attribute_names)
        ):
            raise ConfigurationError(
                "attribute_names",
                attribute_names,
                "must be a list of strings",
                "pass e.g. ['source-ref', 'class']",
            )
        if isinstance(shuffle_config, int) and not isinstance(shuffle_config, bool):
            shuffle_config = ShuffleConfig(shuffle_config)
        if shuffle_config is not None and not isinstance(shuffle_config, ShuffleConfig):
            raise ConfigurationError(
                "shuffle_config", shuffle_config, "must be a ShuffleConfig", "pass ShuffleConfig(seed=42)"
            )
        self.s3_data = s3_data
        self.distribution = distribution
        self.compression = compression
        self.content_type = content_type
        self.record_wrapping = record_wrapping
        self.s3_data_type = s3_data_type
        self.input_mode = input_mode
        self.attribute_names = attribute_names
        self.target_attribute_name = target_attribute_name
        self.shuffle_config = shuffle_config

        # Same construction as the SDK, key for key and in the same order.
        s3_source: dict[str, Any] = {"S3DataType": s3_data_type, "S3Uri": s3_data}
        self.config: dict[str, Any] = {"DataSource": {"S3DataSource": s3_source}}
        if not (target_attribute_name or distribution):
            distribution = "FullyReplicated"
        if distribution is not None:
            s3_source["S3DataDistributionType"] = distribution
        if compression is not None:
            self.config["CompressionType"] = compression
        if content_type is not None:
            self.config["ContentType"] = content_type
        if record_wrapping is not None:
            self.config["RecordWrapperType"] = record_wrapping
        if input_mode is not None:
            self.config["InputMode"] = input_mode
        if attribute_names is not None:
            s3_source["AttributeNames"] = attribute_names
        if target_attribute_name is not None:
            self.config["TargetAttributeName"] = target_attribute_name
        if shuffle_config is not None:
            self.config["ShuffleConfig"] = {"Seed": shuffle_config.seed}

    def __repr__(self) -> str:
        return f"TrainingInput({self.s3_data!r})"


def validate_channel_name(name: object, field: str = "inputs") -> str:
    if (
        not isinstance(name, str)
        or len(name) > MAX_CHANNEL_NAME_CHARS
        or not CHANNEL_NAME_PATTERN.fullmatch(name)
        or name in (".", "..")
    ):
        raise ConfigurationError(
            f"{field} channel name",
            name,
            f"channel names are 1 to {MAX_CHANNEL_NAME_CHARS} characters of letters, digits, '.', '-', '_', "
            "and never '.' or '..' (each channel is the directory input/data/<name>)",
            "rename the channel, e.g. 'train' or 'validation'",
        )
    return name


def validate_s3_uri(uri: str, field: str) -> str:
    """``s3://<bucket>[/<key>]`` with a valid bucket name."""
    parsed = urlparse(uri)
    if parsed.scheme != "s3" or not BUCKET_PATTERN.fullmatch(parsed.netloc or "") or ".." in parsed.netloc:
        raise ConfigurationError(
            field,
            uri,
            "malformed S3 URI (expected s3://<bucket>/<key>, bucket of 3-63 lowercase "
            "letters, digits, '.' and '-')",
            "pass e.g. 's3://my-bucket/data/train'",
        )
    return uri


def file_uri_path(uri: str, field: str) -> Path:
    """The absolute path of a ``file://`` URI (``file:///abs`` or ``file://localhost/abs``)."""
    parsed = urlparse(uri)
    path = unquote(parsed.path)
    if parsed.scheme != "file" or parsed.netloc not in ("", "localhost") or not path.startswith("/"):
        raise ConfigurationError(
            field,
            uri,
            "malformed file URI (expected file:///<absolute path>)",
            f"pass e.g. {Path('/data/train').resolve().as_uri()!r}",
        )
    return Path(path)


def validate_uri(uri: str, field: str, *, local: bool, must_exist: bool = True) -> str:
    """Check a data URI; return it, normalised (scheme-less local paths become ``file://``)."""
    scheme = urlparse(uri).scheme
    if scheme == "s3":
        return validate_s3_uri(uri, field)
    if scheme == "file":
        path = file_uri_path(uri, field)
        if not local:
            raise ConfigurationError(
                field,
                uri,
                "file:// URIs work only for local runs",
                "upload the data to S3 and pass its s3:// URI, or use LocalSession",
            )
        if must_exist and not path.exists():
            raise ConfigurationError(
                field, uri, "no such file or directory", "check the path, or create the data first"
            )
        return uri
    if scheme == "" and local:
        path = Path(uri).expanduser()
        if path.exists():
            return path.resolve().as_uri()
        raise ConfigurationError(
            field,
            uri,
            "no such local file or directory",
            "pass an existing directory, a file:// URI or an s3:// URI",
        )
    raise ConfigurationError(
        field,
        uri,
        'must be a valid S3 or FILE URI: must start with "s3://" or "file://"',
        "upload the data to S3 and pass its s3:// URI" if not local else "pass s3://... or file:///...",
    )


def channels(inputs: Any, *, local: bool) -> list[Channel] | None:
    """``InputDataConfig`` for ``fit(inputs)``; ``None`` when there are no inputs."""
    if inputs is None:
        return None
    if isinstance(inputs, (str, TrainingInput)):
        inputs = {DEFAULT_CHANNEL: inputs}
    if not isinstance(inputs, Mapping):
        raise ConfigurationError(
            "inputs",
            inputs,
            "must be a URI string, a TrainingInput or a dict",
            "pass e.g. {'train': 's3://bucket/train'}",
        )
    result: list[Channel] = []
    for name, value in inputs.items():
        validate_channel_name(name)
        field = f"inputs[{name!r}]"
        if isinstance(value, str):
            refuse_nul({field: value})
            value = TrainingInput(value)
        if not isinstance(value, TrainingInput):
            raise ConfigurationError(
                field,
                value,
                "must be a URI string or a TrainingInput",
                "pass e.g. TrainingInput('s3://bucket/train')",
            )
        if value.target_attribute_name is not None:
            raise ConfigurationError(
                f"{field}.target_attribute_name",
                value.target_attribute_name,
                "an AutoML field that CreateTrainingJob does not accept",
                "drop target_attribute_name",
            )
        source = dict(value.config["DataSource"]["S3DataSource"])
        config = {**value.config, "DataSource": {"S3DataSource": source}}
        source["S3Uri"] = validate_uri(source["S3Uri"], field, local=local)
        result.append(Channel.model_validate({**config, "ChannelName": name}))
    return result
