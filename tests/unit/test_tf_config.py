"""``TF_CONFIG`` per TensorFlow strategy, compared with what SageMaker's TensorFlow toolkit writes
(sagemaker-tensorflow-training ``training.py`` and its unit tests: ``_build_tf_config_for_ps`` and
``_build_tf_config_for_mwms``)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from smlaunch import contract
from smlaunch.runtime.frameworks.tf_config import mwms_config, ps_config, strategy, tf_config_env
from smlaunch.runtime.frameworks.tf_ps import ps_task_config


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
        "cluster": CLUSTER_WITH_PS,
        "environment": "cloud",
        "task": {"index": 0, "type": "master"},
    }
    assert ps_task_config(ps_config(Hosts(HOSTS, "host1")))["task"] == {"index": 0, "type": "ps"}
    assert ps_config(Hosts(HOSTS, "host2")) == {
        "cluster": CLUSTER_WITH_PS,
        "environment": "cloud",
        "task": {"index": 0, "type": "worker"},
    }
    assert ps_task_config(ps_config(Hosts(HOSTS, "host2"))) == {
        "cluster": CLUSTER_WITH_PS,
        "environment": "cloud",
        "task": {"index": 1, "type": "ps"},
    }
    three = ps_config(Hosts(["algo-1", "algo-2", "algo-3"], "algo-3"))
    assert three["cluster"]["worker"] == ["algo-2:2222", "algo-3:2222"]
    assert three["task"] == {"index": 1, "type": "worker"}


def test_mwms_config_equals_the_toolkit() -> None:
    for index, host in enumerate(HOSTS):
        assert mwms_config(Hosts(HOSTS, host)) == {
            "cluster": {"worker": ["host1:8890", "host2:8890"]},
            "environment": "cloud",
            "task": {"index": index, "type": "worker"},
        }


def test_hosts_sharing_an_address_get_ports_of_their_own() -> None:
    local = {"algo-1": "127.0.0.1", "algo-2": "127.0.0.1"}
    hosts = Hosts(["algo-1", "algo-2"], "algo-2", addresses=local, master_port=30000)
    assert mwms_config(hosts)["cluster"] == {"worker": ["127.0.0.1:30001", "127.0.0.1:30002"]}
    assert ps_config(hosts)["cluster"] == {
        "master": ["127.0.0.1:30001"],
        "worker": ["127.0.0.1:30003"],
        "ps": ["127.0.0.1:30002", "127.0.0.1:30004"],
    }
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
def test_strategy_as_the_toolkit_decides(
    params: dict[str, Any], hosts: list[str], expected: str | None
) -> None:
    env = Hosts(hosts, hosts[0], framework_params=params)
    assert strategy(env) == expected
    config = tf_config_env(env)
    if expected is None:
        assert config == {}
    else:
        assert json.loads(config[contract.TF_CONFIG])["environment"] == "cloud"


def test_tf_ps_wrapper_keeps_the_server_until_the_master_is_down(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """smlaunch.runtime.frameworks.tf_ps with a stand-in parameter server (no TensorFlow): the script runs
    with the
    worker's TF_CONFIG, the server with the ps task's; a worker host waits while the master's port
    answers, then stops its server; the exit code is the script's."""
    import signal
    import socket
    import sys
    import threading
    import time

    from smlaunch.runtime.frameworks import tf_ps

    master = socket.socket()
    master.bind(("127.0.0.1", 0))
    master.listen()
    master_address = f"127.0.0.1:{master.getsockname()[1]}"
    config = {
        "cluster": {
            "master": [master_address],
            "ps": ["127.0.0.1:1", "127.0.0.1:2"],
            "worker": ["127.0.0.1:3"],
        },
        "environment": "cloud",
        "task": {"index": 0, "type": "worker"},
    }
    seen = tmp_path / "server.json"
    server_code = f"import os, time; open({str(seen)!r}, 'w').write(os.environ['TF_CONFIG']); time.sleep(120)"
    monkeypatch.setattr(tf_ps, "server_command", lambda: [sys.executable, "-c", server_code])
    monkeypatch.setattr(tf_ps, "POLL_SECONDS", 0.1)
    monkeypatch.setenv("TF_CONFIG", json.dumps(config))
    script = "import json, os, sys; print(json.loads(os.environ['TF_CONFIG'])['task']); sys.exit(0)"
    closed_at: list[float] = []

    def close_master_later() -> None:
        time.sleep(1.5)
        closed_at.append(time.monotonic())
        master.close()

    handlers = (signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT))
    threading.Thread(target=close_master_later, daemon=True).start()
    try:
        code = tf_ps.run([sys.executable, "-c", script])
    finally:
        signal.signal(signal.SIGTERM, handlers[0])
        signal.signal(signal.SIGINT, handlers[1])
    assert code == 0 and closed_at and time.monotonic() >= closed_at[0]  # it waited for the master
    assert json.loads(seen.read_text())["task"] == {"index": 1, "type": "ps"}
    assert json.loads(seen.read_text())["cluster"] == config["cluster"]
