"""``hvd.elastic``: refused. Elastic Horovod (``@hvd.elastic.run``, ``TorchState``) needs the real
Horovod's driver; every name here raises a message saying so."""

from typing import Any

MESSAGE = (
    "horovod.torch.elastic (smlaunch): elastic Horovod needs the real Horovod's elastic driver "
    "(horovodrun --min-np/--max-np); run the training loop without @hvd.elastic.run, or use an image "
    "with Horovod installed"
)


def __getattr__(name: str) -> Any:
    if name.startswith("__"):
        raise AttributeError(name)
    raise NotImplementedError(f"hvd.elastic.{name}: {MESSAGE}")
