"""Write a fake ``/opt/ml`` tree for one host of an N-host job, as the platform writes it.

API (kept small; other test modules import it):

``write_host_tree(base, host, hosts, hyperparameters, instance_type="local", channels={},
instance_groups=None) -> contract.Paths``

- ``base``: the directory that plays ``/opt/ml`` (pass it as ``SAGEMAKER_BASE_DIR``).
- ``host``: this host's name (``algo-2``); ``hosts``: every host of the job (written sorted).
- ``hyperparameters``: the wire form, ``{name: JSON text}`` (``{"epochs": "3", "sagemaker_program":
  "\\"train.py\\""}``), written unchanged.
- ``channels``: ``{name: {"TrainingInputMode": "File", ...}}``; an empty dict value gets the
  platform's defaults. Each channel's data directory is created.
- ``instance_groups``: ``[{"instance_group_name", "instance_type", "hosts"}]``; default one
  ``homogeneousCluster`` group of ``instance_type`` holding ``hosts``.

Creates the directories the platform creates (``contract.Paths.directories()``) and returns the
:class:`~smlaunch.contract.Paths` of the tree.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from smlaunch import contract

_CHANNEL_DEFAULTS = {
    "TrainingInputMode": "File",
    "S3DistributionType": "FullyReplicated",
    "RecordWrapperType": "None",
}


def write_host_tree(
    base: str | Path,
    host: str,
    hosts: Sequence[str],
    hyperparameters: Mapping[str, str],
    instance_type: str = "local",
    channels: Mapping[str, Mapping[str, str]] | None = None,
    instance_groups: Sequence[Mapping[str, Any]] | None = None,
) -> contract.Paths:
    paths = contract.Paths(base)
    for directory in paths.directories():
        directory.mkdir(parents=True, exist_ok=True)
    groups = (
        [dict(g) for g in instance_groups]
        if instance_groups is not None
        else [
            {
                "instance_group_name": contract.DEFAULT_GROUP_NAME,
                "instance_type": instance_type,
                "hosts": list(hosts),
            }
        ]
    )
    current_group = next(g for g in groups if host in g["hosts"])
    resource_config = {
        "current_host": host,
        "current_instance_type": current_group["instance_type"],
        "current_group_name": current_group["instance_group_name"],
        "hosts": sorted(hosts),
        "instance_groups": groups,
        "network_interface_name": contract.DEFAULT_NETWORK_INTERFACE,
    }
    channel_config = {name: dict(conf) or dict(_CHANNEL_DEFAULTS) for name, conf in (channels or {}).items()}
    paths.hyperparameters_file.write_text(json.dumps(dict(hyperparameters)))
    paths.resource_config_file.write_text(json.dumps(resource_config))
    paths.input_data_config_file.write_text(json.dumps(channel_config))
    for name in channel_config:
        paths.channel_dir(name).mkdir(parents=True, exist_ok=True)
    return paths
