"""Horovod's PyTorch API on ``torch.distributed``, for machines without the real Horovod.

Horovod 0.28.1 (its last release) does not build against current PyTorch (its C++ sources are
compiled as C++14 and torch's headers need C++17), so a Horovod script cannot move to a current
torch unchanged. ``horovod.torch`` here gives the same calls and numbers on torch.distributed
(gloo on CPU, NCCL on GPU). ``horovod.tensorflow`` and ``horovod.keras`` are refused on import:
they need the real Horovod, which SageMaker's TensorFlow images have.
"""

__version__ = "0.28.1+smlaunch"
