"""``TF_CONFIG`` per TensorFlow strategy, compared with what SageMaker's TensorFlow toolkit writes
(sagemaker-tensorflow-training ``training.py`` and its unit tests: ``_build_tf_config_for_ps`` and
``_build_tf_config_for_mwms``)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import pytest

from runtime import contract
from runtime.tf_config import mwms_config, ps_config, strategy, tf_config_env


@dataclass
class Hosts:
    distribution_hosts: list[str]
    current_host: str
    framework_params: dict[str, Any] = field(default_factory=dict)
    addresses: dict[str, str] = field(default_factory=dict)
    master_port: int = 7777

    def address_of(self, host: str) -> str:
        return self.addresses.get(host, host)


HOSTS = ["host1", "host2"]
# The toolkit's unit tests (test_training.py): CLUSTER_WITH_PS and the tasks.
CLUSTER_WITH_PS = {"master": ["host1:2222"], "worker": ["host2:2222"], "ps": ["host1:2223", "host2:2223"]}


def test_parameter_server_config_equals_the_toolkit() -> None:
    assert ps_config(Hosts(HOSTS, "host1")) == {
        "cluster": CLUSTER_WITH_PS, "environment": "cloud", "task": {"index": 0, "type": "master"}}
    assert ps_config(Hosts(HOSTS, "host1"), ps_task=True)["task"] == {"index": 0, "type": "ps"}
    assert ps_config(Hosts(HOSTS, "host2")) == {
        "cluster": CLUSTER_WITH_PS, "environment": "cloud", "task": {"index": 0, "type": "worker"}}
    assert ps_config(Hosts(HOSTS, "host2"), ps_task=True)["task"] == {"index": 1, "type": "ps"}
    three = ps_config(Hosts(["algo-1", "algo-2", "algo-3"], "algo-3"))
    assert three["cluster"]["worker"] == ["algo-2:2222", "algo-3:2222"]
    assert three["task"] == {"index": 1, "type": "worker"}


def test_mwms_config_equals_the_toolkit() -> None:
    for index, host in enumerate(HOSTS):
        assert mwms_config(Hosts(HOSTS, host)) == {
            "cluster": {"worker": ["host1:8890", "host2:8890"]}, "environment": "cloud",
            "task": {"index": index, "type": "worker"}}


def test_hosts_sharing_an_address_get_ports_of_their_own() -> None:
    local = {"algo-1": "127.0.0.1", "algo-2": "127.0.0.1"}
    hosts = Hosts(["algo-1", "algo-2"], "algo-2", addresses=local, master_port=30000)
    assert mwms_config(hosts)["cluster"] == {"worker": ["127.0.0.1:30001", "127.0.0.1:30002"]}
    assert ps_config(hosts)["cluster"] == {"master": ["127.0.0.1:30001"], "worker": ["127.0.0.1:30003"],
                                           "ps": ["127.0.0.1:30002", "127.0.0.1:30004"]}
    distinct = Hosts(["algo-1", "algo-2"], "algo-1", addresses={"algo-1": "10.0.0.1", "algo-2": "10.0.0.2"})
    assert mwms_config(distinct)["cluster"] == {"worker": ["10.0.0.1:8890", "10.0.0.2:8890"]}


@pytest.mark.parametrize(
    ("params", "hosts", "expected"),
    [
        ({contract.HP_MWMS_ENABLED: True}, HOSTS, "multi_worker_mirrored_strategy"),
        ({contract.HP_MWMS_ENABLED: True}, ["host1"], "multi_worker_mirrored_strategy"),
        ({contract.HP_PARAMETER_SERVER_ENABLED: True}, HOSTS, "parameter_server"),
        ({contract.HP_PARAMETER_SERVER_ENABLED: True}, ["host1"], None),  # as the toolkit: >1 host
        ({contract.HP_MWMS_ENABLED: False}, HOSTS, None),
        ({contract.HP_MPI_ENABLED: True}, HOSTS, None),
    ],
)
def test_strategy_as_the_toolkit_decides(params: dict[str, Any], hosts: list[str],
                                         expected: str | None) -> None:
    env = Hosts(hosts, hosts[0], framework_params=params)
    assert strategy(env) == expected
    config = tf_config_env(env)
    if expected is None:
        assert config == {}
    else:
        assert json.loads(config[contract.TF_CONFIG])["environment"] == "cloud"
