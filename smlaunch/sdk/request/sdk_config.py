"""SageMaker SDK v2's ``config.yaml`` defaults for training jobs (``sagemaker.config``, 2.257.x).

Where they are read from, in this order, a later file's values overriding an earlier one's
(``botocore.utils.merge_dicts``, as the SDK merges them):

1. the admin file: ``$SAGEMAKER_ADMIN_CONFIG_OVERRIDE``, else ``<first of $XDG_CONFIG_DIRS, or
   /etc/xdg>/sagemaker/config.yaml``;
2. the user file: ``$SAGEMAKER_USER_CONFIG_OVERRIDE``, else ``<$XDG_CONFIG_HOME, or
   ~/.config>/sagemaker/config.yaml``.

Each may be a file, a directory holding ``config.yaml``, or an ``s3://`` URI of either. A default
location that does not exist is skipped; an override that does not exist is an error, as in the SDK.
(On macOS the SDK's default locations are ``platformdirs``' ``Library/Application Support``
folders; this module follows them there too.)

What an estimator takes from them (an argument given explicitly always wins; ``None`` is "not
given"), as ``EstimatorBase.__init__`` and ``Session.get_train_request`` resolve them:

| key                                                       | argument                        |
|-----------------------------------------------------------|---------------------------------|
| ``SageMaker.TrainingJob.RoleArn``                         | ``role``                        |
| ``SageMaker.TrainingJob.OutputDataConfig.KmsKeyId``       | ``output_kms_key``              |
| ``SageMaker.TrainingJob.ResourceConfig.VolumeKmsKeyId``   | ``volume_kms_key`` (types with  |
|                                                           | an EBS volume only)             |
| ``SageMaker.TrainingJob.VpcConfig.Subnets``               | ``subnets``                     |
| ``SageMaker.TrainingJob.VpcConfig.SecurityGroupIds``      | ``security_group_ids``          |
| ``SageMaker.TrainingJob.EnableNetworkIsolation``          | ``enable_network_isolation``    |
| ``SageMaker.TrainingJob.EnableInterContainerTrafficEncryption`` | ``encrypt_inter_container_traffic`` |
| ``SageMaker.TrainingJob.ProfilerConfig.DisableProfiler``  | ``disable_profiler``            |
| ``SageMaker.TrainingJob.Environment``                     | ``environment`` (the whole map) |
| ``SageMaker.TrainingJob.Tags``                            | ``tags``: appended, a key the   |
|                                                           | user set is kept as the user's  |
| ``SageMaker.PythonSDK.Modules.Estimator.DebugHookConfig`` | ``debugger_hook_config``        |
| ``SageMaker.PythonSDK.Modules.Session.DefaultS3Bucket``   | ``Session(default_bucket=)``    |
| ``SageMaker.PythonSDK.Modules.Session.DefaultS3ObjectKeyPrefix`` | ``Session(default_bucket_prefix=)`` |

Deliberate difference: local sessions take ``Environment`` and ``Tags`` only. The other keys
configure AWS (VPC, KMS, IAM, network isolation, profiling), which a job on this machine has none
of; applying a site-wide VPC would refuse every local job the notebook starts.

Only the keys above are read and checked (type, and the role's pattern), each error naming the
file and the key; the rest of the SDK's schema is left to the SDK. PyYAML is imported only when a
file exists.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any
from urllib.parse import urlparse

from smlaunch.sdk.errors import ConfigurationError
from smlaunch.sdk.request import naming

ADMIN_OVERRIDE_ENV = "SAGEMAKER_ADMIN_CONFIG_OVERRIDE"
USER_OVERRIDE_ENV = "SAGEMAKER_USER_CONFIG_OVERRIDE"
CONFIG_FILE = "config.yaml"
_APP = "sagemaker"


@dataclass(frozen=True)
class Key:
    """One config key an estimator reads: its path, the argument it fills, its type, and whether a
    local session takes it."""

    path: str
    argument: str
    kind: str  # "str", "bool", "str-list", "str-map", "tags"
    local: bool = False


TRAINING_JOB_KEYS = (
    Key("SageMaker.TrainingJob.RoleArn", "role", "str"),
    Key("SageMaker.TrainingJob.OutputDataConfig.KmsKeyId", "output_kms_key", "str"),
    Key("SageMaker.TrainingJob.ResourceConfig.VolumeKmsKeyId", "volume_kms_key", "str"),
    Key("SageMaker.TrainingJob.VpcConfig.Subnets", "subnets", "str-list"),
    Key("SageMaker.TrainingJob.VpcConfig.SecurityGroupIds", "security_group_ids", "str-list"),
    Key("SageMaker.TrainingJob.EnableNetworkIsolation", "enable_network_isolation", "bool"),
    Key(
        "SageMaker.TrainingJob.EnableInterContainerTrafficEncryption",
        "encrypt_inter_container_traffic",
        "bool",
    ),
    Key("SageMaker.TrainingJob.ProfilerConfig.DisableProfiler", "disable_profiler", "bool"),
    Key("SageMaker.TrainingJob.Environment", "environment", "str-map", local=True),
    Key("SageMaker.PythonSDK.Modules.Estimator.DebugHookConfig", "debugger_hook_config", "bool"),
)
"""The keys resolved as constructor arguments (``None`` when not given)."""
TAGS = Key("SageMaker.TrainingJob.Tags", "tags", "tags", local=True)
DEFAULT_S3_BUCKET = Key("SageMaker.PythonSDK.Modules.Session.DefaultS3Bucket", "default_bucket", "str")
DEFAULT_S3_PREFIX = Key(
    "SageMaker.PythonSDK.Modules.Session.DefaultS3ObjectKeyPrefix", "default_bucket_prefix", "str"
)
_ALL_KEYS = (*TRAINING_JOB_KEYS, TAGS, DEFAULT_S3_BUCKET, DEFAULT_S3_PREFIX)
# Instance families without an EBS volume to encrypt (the SDK's ``volume_size_supported``): a "d"
# in the family (local NVMe storage), and these.
_NO_VOLUME_FAMILIES = ("g5", "g6", "p5", "trn1")


def default_locations(environ: Mapping[str, str] | None = None) -> tuple[str, str]:
    """The admin and user ``config.yaml`` paths the SDK reads when no override is set."""
    env = os.environ if environ is None else environ
    if sys.platform == "darwin":
        site = Path("/Library/Application Support")
        user = Path(env.get("HOME", str(Path.home()))) / "Library" / "Application Support"
    else:
        site = Path((env.get("XDG_CONFIG_DIRS", "").strip() or "/etc/xdg").split(os.pathsep)[0])
        user = Path(env.get("XDG_CONFIG_HOME", "").strip() or Path.home() / ".config")
    return str(site / _APP / CONFIG_FILE), str(user / _APP / CONFIG_FILE)


def load(
    environ: Mapping[str, str] | None = None, s3_client: Callable[[], Any] | None = None
) -> dict[str, Any]:
    """The merged config (``{}`` when there is none), each file's keys checked.

    ``s3_client``: makes the boto3 S3 client for ``s3://`` locations (called only for them).
    """
    from botocore.utils import merge_dicts

    env = os.environ if environ is None else environ
    admin_default, user_default = default_locations(env)
    merged: dict[str, Any] = {}
    for variable, default in ((ADMIN_OVERRIDE_ENV, admin_default), (USER_OVERRIDE_ENV, user_default)):
        location = env.get(variable) or default
        content = _read(location, variable if env.get(variable) else None, s3_client)
        if content:
            check(content, location)
            merge_dicts(merged, content)
    return merged


def _read(location: str, variable: str | None, s3_client: Callable[[], Any] | None) -> Any:
    """The YAML at ``location`` (a file, a directory's ``config.yaml``, or ``s3://``), or None when
    a default location is absent; an override (``variable``) that names nothing is an error."""
    if location.startswith("s3://"):
        text = _read_s3(location, variable or "config", s3_client)
    else:
        path = Path(location)
        if path.is_dir():
            path = path / CONFIG_FILE
        if not path.exists():  # as the SDK: anything that exists is read (/dev/null: no config)
            if variable is None:
                return None
            raise ConfigurationError(
                variable, location, "no config file there", f"point {variable} at a config.yaml, or unset it"
            )
        text = path.read_text(encoding="utf-8")
    import yaml

    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as error:
        raise ConfigurationError(
            variable or "config.yaml", location, f"not valid YAML ({error})", "fix the file's syntax"
        ) from None


def _read_s3(uri: str, field: str, s3_client: Callable[[], Any] | None) -> str:
    """The SDK's rule: a prefix naming one object is that file; one naming several is a folder,
    which must hold ``config.yaml``."""
    if s3_client is None:
        raise ConfigurationError(field, uri, "no S3 client to read it with", "use a local config file")
    client = s3_client()
    parsed = urlparse(uri)
    bucket, prefix = parsed.netloc, parsed.path.lstrip("/")
    keys = [
        item["Key"]
        for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix)
        for item in page.get("Contents", [])
    ]
    if not keys:
        raise ConfigurationError(field, uri, "no object under that S3 prefix", "provide a valid S3 path")
    key = keys[0]
    if len(keys) > 1:
        key = str(PurePosixPath(prefix, CONFIG_FILE))
        if key not in keys:
            raise ConfigurationError(
                field,
                uri,
                f"several objects under that prefix and no {CONFIG_FILE}",
                f"name the file, or a folder holding {CONFIG_FILE}",
            )
    return str(client.get_object(Bucket=bucket, Key=key)["Body"].read().decode("utf-8"))


def session_config(given: Any, s3_client: Callable[[], Any] | None = None) -> dict[str, Any]:
    """A session's config: ``given`` (checked) when the caller passed one, else :func:`load`."""
    if given is None:
        return load(s3_client=s3_client)
    check(given, "sagemaker_config")
    return dict(given)


def value(config: Mapping[str, Any] | None, path: str) -> Any:
    """The value at the dotted ``path`` of ``config``, or None."""
    node: Any = config or {}
    for part in path.split("."):
        if not isinstance(node, Mapping) or part not in node:
            return None
        node = node[part]
    return node


def check(config: Any, source: str) -> None:
    """Every key this module reads has the type the SDK's schema gives it (the role its pattern);
    errors name ``source`` (the file) and the key."""
    if not isinstance(config, Mapping):
        raise ConfigurationError(
            source, config, "a SageMaker config is a mapping", "see the SDK's config.yaml"
        )
    for key in _ALL_KEYS:
        found = value(config, key.path)
        if found is not None and not _has_kind(found, key.kind):
            raise ConfigurationError(
                f"{source}: {key.path}", found, f"must be {key.kind.replace('-', ' ')}", _FIXES[key.kind]
            )
    role = value(config, TRAINING_JOB_KEYS[0].path)
    if role is not None and not naming.ROLE_ARN_PATTERN.fullmatch(role):
        raise ConfigurationError(
            f"{source}: {TRAINING_JOB_KEYS[0].path}",
            role,
            "not an IAM role ARN",
            "write arn:aws:iam::<12-digit account>:role/<name>",
        )


_FIXES = {
    "str": "write a string",
    "bool": "write true or false",
    "str-list": "write a list of strings",
    "str-map": "write a mapping of strings to strings",
    "tags": "write a list of {Key: ..., Value: ...}",
}


def _has_kind(found: Any, kind: str) -> bool:
    if kind == "str":
        return isinstance(found, str)
    if kind == "bool":
        return isinstance(found, bool)
    if kind == "str-list":
        return isinstance(found, list) and all(isinstance(item, str) for item in found)
    if kind == "str-map":
        return isinstance(found, Mapping) and all(
            isinstance(k, str) and isinstance(v, str) for k, v in found.items()
        )
    return isinstance(found, list) and all(
        isinstance(tag, Mapping)
        and set(tag) == {"Key", "Value"}
        and all(isinstance(v, str) for v in tag.values())
        for tag in found
    )


def supports_volume_kms(instance_type: str) -> bool:
    """Whether the type has an EBS volume a KMS key can encrypt (SDK's ``instance_supports_kms``)."""
    parts = instance_type.split(".")
    if instance_type.startswith("local") or len(parts) != 3:
        return False
    family = parts[1]
    return "d" not in family and not family.startswith(_NO_VOLUME_FAMILIES)


def estimator_arguments(
    config: Mapping[str, Any] | None, instance_type: str, is_local: bool, **arguments: Any
) -> dict[str, Any]:
    """``arguments`` (the constructor's, by name) with each one left ``None`` filled from
    ``config`` (see the module table); what a local session does not take stays as given."""
    resolved = dict(arguments)
    for key in TRAINING_JOB_KEYS:
        if resolved.get(key.argument) is not None or (is_local and not key.local):
            continue
        if key.argument == "volume_kms_key" and not supports_volume_kms(instance_type):
            continue
        resolved[key.argument] = value(config, key.path)
    return resolved


def merged_tags(
    tags: list[dict[str, str]] | None, config: Mapping[str, Any] | None
) -> list[dict[str, str]] | None:
    """``tags`` plus the config's tags whose key ``tags`` lacks, as the SDK appends them."""
    extra = value(config, TAGS.path) or []
    if not extra:
        return tags
    merged = list(tags or [])
    for tag in extra:
        if not any(mine["Key"] == tag["Key"] for mine in merged):
            merged.append(dict(tag))
    return merged
