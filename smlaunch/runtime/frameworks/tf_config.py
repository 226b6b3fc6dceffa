"""``TF_CONFIG`` as SageMaker's TensorFlow toolkit writes it (sagemaker-tensorflow-training,
``training.py``: ``_build_tf_config_for_ps`` and ``_build_tf_config_for_mwms``).

- ``sagemaker_multi_worker_mirrored_strategy_enabled``: every host is a worker, in host order::

    {"cluster": {"worker": ["algo-1:8890", "algo-2:8890"]}, "environment": "cloud",
     "task": {"index": <host index>, "type": "worker"}}

- ``sagemaker_parameter_server_enabled`` with more than one host: the first host is the master, the
  others workers (port 2222), and every host also runs a parameter server (port 2223)::

    {"cluster": {"master": ["algo-1:2222"], "ps": ["algo-1:2223", "algo-2:2223"],
                 "worker": ["algo-2:2222"]}, "environment": "cloud",
     "task": {"index": <index among its role>, "type": "master" | "worker" | "ps"}}

Hosts appear as :meth:`smlaunch.runtime.environment.Environment.address_of` gives them: the host name on
SageMaker (as the toolkit writes), the mapped address where the backend maps hosts to addresses.
Where several hosts share one address (emulated hosts on 127.0.0.1), the toolkit's fixed ports would
collide, so each host gets its own ports counted from the job's master port instead
(``master port + 1 + host index`` for MWMS; ``+ 1 + 2 x index`` for master/worker and ``+ 2 + 2 x
index`` for ps). Pure: no I/O.
"""

from __future__ import annotations

import json
from typing import Any, Protocol

from smlaunch import contract
from smlaunch.contract.hyperparameters import truthy

MWMS_PORT = 8890
WORKER_PORT = 2222
PS_PORT = 2223


class _Hosts(Protocol):
    @property
    def distribution_hosts(self) -> list[str]: ...

    @property
    def current_host(self) -> str: ...

    @property
    def master_port(self) -> int: ...

    @property
    def framework_params(self) -> dict[str, Any]: ...

    def address_of(self, host: str) -> str: ...


def strategy(env: _Hosts) -> str | None:
    """``"parameter_server"``, ``"multi_worker_mirrored_strategy"`` or None, as the toolkit decides
    (parameter servers only with more than one host; they win over MWMS)."""
    params = env.framework_params
    if truthy(params.get(contract.HP_PARAMETER_SERVER_ENABLED, False)) and len(env.distribution_hosts) > 1:
        return "parameter_server"
    if truthy(params.get(contract.HP_MWMS_ENABLED, False)):
        return "multi_worker_mirrored_strategy"
    return None


def _ports(env: _Hosts) -> tuple[list[str], bool]:
    hosts = list(env.distribution_hosts)
    addresses = [env.address_of(h) for h in hosts]
    return addresses, len(set(addresses)) < len(addresses)


def mwms_config(env: _Hosts) -> dict[str, Any]:
    """The MWMS ``TF_CONFIG`` of this host (``_build_tf_config_for_mwms``)."""
    addresses, shared = _ports(env)
    workers = [f"{a}:{env.master_port + 1 + i if shared else MWMS_PORT}" for i, a in enumerate(addresses)]
    index = list(env.distribution_hosts).index(env.current_host)
    task = {"index": index, "type": "worker"}
    return {"cluster": {"worker": workers}, "environment": "cloud", "task": task}


def ps_config(env: _Hosts) -> dict[str, Any]:
    """The parameter-server ``TF_CONFIG`` of this host's training process (``_build_tf_config_for_ps``;
    its parameter server's is :func:`smlaunch.runtime.frameworks.tf_ps.ps_task_config`)."""
    hosts = list(env.distribution_hosts)
    addresses, shared = _ports(env)

    def worker(i: int) -> str:
        return f"{addresses[i]}:{env.master_port + 1 + 2 * i if shared else WORKER_PORT}"

    def ps(i: int) -> str:
        return f"{addresses[i]}:{env.master_port + 2 + 2 * i if shared else PS_PORT}"

    cluster: dict[str, list[str]] = {"master": [worker(0)]}
    if len(hosts) > 1:
        cluster["ps"] = [ps(i) for i in range(len(hosts))]
        cluster["worker"] = [worker(i) for i in range(1, len(hosts))]
    index = hosts.index(env.current_host)
    if index == 0:
        task = {"index": 0, "type": "master"}
    else:
        task = {"index": index - 1, "type": "worker"}
    return {"cluster": cluster, "environment": "cloud", "task": task}


def tf_config_env(env: _Hosts) -> dict[str, str]:
    """``{"TF_CONFIG": ...}`` for this host's training process, or ``{}`` without a TensorFlow
    strategy."""
    chosen = strategy(env)
    if chosen == "parameter_server":
        return {contract.TF_CONFIG: json.dumps(ps_config(env))}
    if chosen == "multi_worker_mirrored_strategy":
        return {contract.TF_CONFIG: json.dumps(mwms_config(env))}
    return {}
