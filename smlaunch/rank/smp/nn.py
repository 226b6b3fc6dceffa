"""``smp.nn``: smp v1's modules, where they reduce to torch's (``smdistributed.modelparallel.torch.nn``).

Without tensor parallelism (smlaunch's engine has ``tensor_parallel_degree=1``) smp's distributed
modules hold the whole layer, so the ones with a torch counterpart *are* that counterpart with
smp's constructor: ``DistributedLinear`` is ``torch.nn.Linear``, ``DistributedEmbedding`` is
``torch.nn.Embedding`` (smp's ``initializer_range`` initialises the weight from N(0, range²), as
smp does), ``FusedLayerNorm`` is ``torch.nn.LayerNorm``. smp's transformer building blocks and its
flash-attention layer have their own semantics (fused, tensor-parallel, Hugging Face translation);
constructing one raises :class:`~smlaunch.rank.smp.config.SMPUnsupportedAPIError` naming the torch
module to use instead.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from smlaunch.rank.smp.config import SMPUnsupportedAPIError

_TRANSFORMER = (
    "torch.nn.TransformerEncoderLayer / torch.nn.TransformerEncoder (or your own block) "
    "in an nn.Sequential the pipeline can split; tensor parallelism is not supported"
)


class DistributedLinear(nn.Linear):
    """``smp.nn.DistributedLinear(in_features, out_features)``: ``torch.nn.Linear`` (tp=1)."""

    def __init__(self, in_features: int, out_features: int, bias: bool = True, **_: Any) -> None:
        super().__init__(in_features, out_features, bias=bias)


class DistributedEmbedding(nn.Embedding):
    """``smp.nn.DistributedEmbedding``: ``torch.nn.Embedding`` (tp=1); smp-only arguments accepted."""

    def __init__(
        self,
        num_embeddings: int,
        embedding_dim: int,
        padding_idx: int | None = None,
        max_norm: float | None = None,
        norm_type: float = 2.0,
        scale_grad_by_freq: bool = False,
        sparse: bool = False,
        initializer_range: float | None = 0.02,
        **_: Any,
    ) -> None:
        super().__init__(
            num_embeddings,
            embedding_dim,
            padding_idx=padding_idx,
            max_norm=max_norm,
            norm_type=norm_type,
            scale_grad_by_freq=scale_grad_by_freq,
            sparse=sparse,
        )
        if initializer_range is not None:
            with torch.no_grad():
                self.weight.normal_(0.0, initializer_range)
                if padding_idx is not None:
                    self.weight[padding_idx].zero_()


class FusedLayerNorm(nn.LayerNorm):
    """``smp.nn.FusedLayerNorm(normalized_shape, eps, elementwise_affine)``: ``torch.nn.LayerNorm``."""

    def __init__(
        self, normalized_shape: Any, eps: float = 1e-5, elementwise_affine: bool = True, **_: Any
    ) -> None:
        super().__init__(normalized_shape, eps=eps, elementwise_affine=elementwise_affine)


def _unsupported(name: str, alternative: str) -> type[nn.Module]:
    def __init__(self: nn.Module, *args: Any, **kwargs: Any) -> None:
        raise SMPUnsupportedAPIError(f"smp.nn.{name}", alternative)

    return type(name, (nn.Module,), {"__init__": __init__, "__doc__": f"Unsupported: use {alternative}."})


DistributedTransformerLMHead = _unsupported("DistributedTransformerLMHead", _TRANSFORMER)
DistributedTransformer = _unsupported("DistributedTransformer", _TRANSFORMER)
DistributedTransformerLayer = _unsupported("DistributedTransformerLayer", _TRANSFORMER)
DistributedAttentionLayer = _unsupported(
    "DistributedAttentionLayer", "torch.nn.MultiheadAttention; tensor parallelism is not supported"
)
DistributedTransformerOutputLayer = _unsupported("DistributedTransformerOutputLayer", _TRANSFORMER)
FlashAttentionLayer = _unsupported("FlashAttentionLayer", "torch.nn.functional.scaled_dot_product_attention")

__all__ = [
    "DistributedAttentionLayer",
    "DistributedEmbedding",
    "DistributedLinear",
    "DistributedTransformer",
    "DistributedTransformerLMHead",
    "DistributedTransformerLayer",
    "DistributedTransformerOutputLayer",
    "FlashAttentionLayer",
    "FusedLayerNorm",
]
