"""One process per host: the user's entry point with the ``SM_*`` environment and the argv.

What SageMaker's toolkit does without a distribution flag (``ProcessRunner``): every host runs the
script on its own; nothing is ranked. The process is labelled ``rank 0`` of its host in logs and
failure reports. With TensorFlow's ``multi_worker_mirrored_strategy`` or ``parameter_server`` the
process also gets the ``TF_CONFIG`` SageMaker's TensorFlow toolkit writes
(:mod:`smlaunch.runtime.frameworks.tf_config`);
with parameter servers it runs under :mod:`smlaunch.runtime.frameworks.tf_ps`, which also serves this host's
parameter
server.
"""

from __future__ import annotations

from typing import ClassVar

from smlaunch import contract
from smlaunch.runtime import env_vars
from smlaunch.runtime.frameworks.tf_config import strategy, tf_config_env
from smlaunch.runtime.launchers.base import LaunchPlan, ProcessSpec
from smlaunch.runtime.launchers.launcher import Launcher


class ProcessLauncher(Launcher):
    name: ClassVar[str] = "process"

    def command(self) -> list[str]:
        """Entry point argv head plus the hyperparameters' argv."""
        return env_vars.program_argv(self.env, self.python)

    def plan(self) -> LaunchPlan:
        env = self.env
        process_env = env_vars.process_env(env)
        tf_env = tf_config_env(env) if env.distribution_enabled else {}
        process_env.update(tf_env)
        argv = self.command()
        if env.distribution_enabled and strategy(env) == "parameter_server":
            argv = [
                self.python,
                "-m",
                "smlaunch.runtime.frameworks.tf_ps",
                *argv,
            ]  # plus this host's parameter server
        spec = ProcessSpec(label="rank 0", argv=argv, env=process_env, cwd=str(env.code_dir), rank=0)
        topology = {
            "hosts": ", ".join(env.hosts),
            "current host": env.current_host,
            "instance type": env.current_instance_type,
            "processes on this host": 1,
        }
        if tf_env:
            topology["TF_CONFIG"] = tf_env[contract.TF_CONFIG]
        where = f"host {env.hosts.index(env.current_host) + 1} of {len(env.hosts)}"
        summary = f"{env.user_entry_point} on {where}"
        return LaunchPlan(launcher=self.name, processes=[spec], topology=topology, summary=summary)
