"""smp's rank layout (``placement_strategy``) as pure arithmetic, and its DeviceMesh.

A strategy is three letters, a permutation of ``D`` (reduced data parallel), ``P`` (pipeline) and
``T`` (tensor); ``cluster`` is ``DPT`` and ``spread`` is ``TPD``. The right-most letter varies fastest
over ascending global ranks, so the layout is exactly a row-major mesh whose dimension names are the
letters (``docs/smp.md``, from smp's "Ranking Basics"):

* ``pp_rank``/``tp_rank``/``rdp_rank`` are the P/T/D coordinates;
* ``dp`` is the (D, T) sub-grid and ``mp`` the (P, T) sub-grid, each flattened row-major with the
  two letters kept in strategy order.

Everything here is computed without a process group, so it can be checked against smp's documented
tables in a unit test. :func:`build_mesh` is the only function that touches torch.distributed.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from enum import Enum
from typing import Any

from smlaunch.rank.smp.config import PLACEMENT_ALIASES


class CommGroup(Enum):
    """smp's communication groups; values are the mesh letters each group varies."""

    WORLD = "DPT"
    PP_GROUP = "P"
    TP_GROUP = "T"
    RDP_GROUP = "D"
    DP_GROUP = "DT"
    MP_GROUP = "PT"


class RankType(Enum):
    """How a rank number passed to ``send``/``recv_from`` is interpreted."""

    WORLD_RANK = "DPT"
    PP_RANK = "P"
    TP_RANK = "T"
    RDP_RANK = "D"
    DP_RANK = "DT"
    MP_RANK = "PT"


@dataclass(frozen=True)
class RankLayout:
    """The placement of ``world_size`` ranks for one strategy; all methods are pure."""

    world_size: int
    pp: int
    tp: int
    strategy: str

    def __post_init__(self) -> None:
        letters = PLACEMENT_ALIASES.get(self.strategy, self.strategy)
        object.__setattr__(self, "strategy", letters)
        if sorted(letters) != ["D", "P", "T"]:
            raise ValueError(f"placement_strategy={self.strategy!r}: not a permutation of D, P, T")
        if self.world_size % (self.pp * self.tp):
            raise ValueError(f"world size {self.world_size} is not a multiple of pp*tp={self.pp * self.tp}")

    @property
    def rdp(self) -> int:
        return self.world_size // (self.pp * self.tp)

    @property
    def sizes(self) -> dict[str, int]:
        return {"D": self.rdp, "P": self.pp, "T": self.tp}

    @property
    def shape(self) -> tuple[int, ...]:
        """Mesh shape in strategy order (the letters are the mesh dimension names)."""
        return tuple(self.sizes[c] for c in self.strategy)

    def coords(self, rank: int) -> dict[str, int]:
        """``{"D": rdp_rank, "P": pp_rank, "T": tp_rank}`` of a global rank (row-major unravel)."""
        if not 0 <= rank < self.world_size:
            raise ValueError(f"rank {rank} outside world of size {self.world_size}")
        out: dict[str, int] = {}
        rest = rank
        for letter in reversed(self.strategy):
            size = self.sizes[letter]
            out[letter] = rest % size
            rest //= size
        return out

    def rank_of(self, coords: dict[str, int]) -> int:
        """Global rank of a full coordinate triple (row-major ravel in strategy order)."""
        rank = 0
        for letter in self.strategy:
            rank = rank * self.sizes[letter] + coords[letter]
        return rank

    def _sub_index(self, coords: dict[str, int], letters: str) -> int:
        idx = 0
        for letter in self.strategy:
            if letter in letters:
                idx = idx * self.sizes[letter] + coords[letter]
        return idx

    def group_rank(self, rank: int, letters: str) -> int:
        """Index of ``rank`` within its group varying ``letters`` (strategy-order row-major)."""
        return self._sub_index(self.coords(rank), letters)

    def group_size(self, letters: str) -> int:
        size = 1
        for letter in letters:
            size *= self.sizes[letter]
        return size

    def group_of(self, rank: int, letters: str, **fixed: int) -> list[int]:
        """Ranks of the group varying ``letters`` that contains ``rank``, ordered by group rank.

        ``fixed`` overrides coordinates that do not vary (``pp_rank=1`` style, by letter ``P=1``).
        """
        base = self.coords(rank)
        base.update(fixed)
        varying = [c for c in self.strategy if c in letters]
        ranks = []
        for combo in itertools.product(*(range(self.sizes[c]) for c in varying)):
            c = dict(base)
            c.update(zip(varying, combo, strict=True))
            ranks.append(self.rank_of(c))
        return ranks

    def all_groups(self, letters: str) -> list[list[int]]:
        """Every group varying ``letters``, each once, in ascending order of its first rank."""
        seen: set[int] = set()
        groups = []
        for r in range(self.world_size):
            if r in seen:
                continue
            g = self.group_of(r, letters)
            seen.update(g)
            groups.append(g)
        return groups

    def global_rank(self, rank: int, group_rank: int, letters: str) -> int:
        """The global rank of member ``group_rank`` of ``rank``'s group varying ``letters``."""
        group = self.group_of(rank, letters)
        if not 0 <= group_rank < len(group):
            raise ValueError(f"rank {group_rank} outside group of size {len(group)}")
        return group[group_rank]

    # smp's names ------------------------------------------------------------------------------

    def pp_rank(self, rank: int) -> int:
        return self.coords(rank)["P"]

    def tp_rank(self, rank: int) -> int:
        return self.coords(rank)["T"]

    def rdp_rank(self, rank: int) -> int:
        return self.coords(rank)["D"]

    def dp_rank(self, rank: int) -> int:
        return self.group_rank(rank, "DT")

    def mp_rank(self, rank: int) -> int:
        return self.group_rank(rank, "PT")


def build_mesh(layout: RankLayout, device_type: str) -> Any:
    """The DeviceMesh of the layout: shape in strategy order, dims named by the letters.

    Must be called on every rank after ``init_process_group``.
    """
    from torch.distributed.device_mesh import init_device_mesh

    return init_device_mesh(device_type, layout.shape, mesh_dim_names=tuple(layout.strategy))
