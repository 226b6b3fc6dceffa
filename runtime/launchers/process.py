"""One process per host: the user's entry point with the ``SM_*`` environment and the argv.

What SageMaker's toolkit does without a distribution flag (``ProcessRunner``): every host runs the
script on its own; nothing is ranked. The process is labelled ``rank 0`` of its host in logs and
failure reports.
"""

from __future__ import annotations

from typing import ClassVar

from runtime.code import entry_point_command
from runtime.launchers.base import Launcher, LaunchPlan, ProcessSpec


class ProcessLauncher(Launcher):
    name: ClassVar[str] = "process"

    def command(self) -> list[str]:
        """Entry point argv head plus the hyperparameters' argv."""
        return (
            entry_point_command(self.env.code_dir, self.env.user_entry_point, self.python)
            + self.env.user_args()
        )

    def plan(self) -> LaunchPlan:
        env = self.env
        spec = ProcessSpec(
            label="rank 0", argv=self.command(), env=env.process_env(), cwd=str(env.code_dir), rank=0
        )
        topology = {
            "hosts": ", ".join(env.hosts),
            "current host": env.current_host,
            "instance type": env.current_instance_type,
            "processes on this host": 1,
        }
        return LaunchPlan(launcher=self.name, processes=[spec], topology=topology)
