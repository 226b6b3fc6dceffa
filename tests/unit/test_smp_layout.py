"""smp's rank layout tables (general doc "Ranking Basics" and the TP placement tables), pure arithmetic."""

from __future__ import annotations

import itertools

import pytest

from smlaunch.rank.smp.layout import RankLayout


def test_ranking_basics_8_processes_2_partitions_spread() -> None:
    lay = RankLayout(8, pp=2, tp=1, strategy="spread")
    assert lay.all_groups("PT") == [[0, 4], [1, 5], [2, 6], [3, 7]]
    assert lay.all_groups("DT") == [[0, 1, 2, 3], [4, 5, 6, 7]]
    assert [lay.mp_rank(r) for r in range(8)] == [r // 4 for r in range(8)]
    assert lay.dp_rank(6) == 2


def test_ranking_basics_8_processes_2_partitions_cluster() -> None:
    lay = RankLayout(8, pp=2, tp=1, strategy="cluster")
    assert lay.all_groups("PT") == [[0, 1], [2, 3], [4, 5], [6, 7]]
    assert lay.all_groups("DT") == [[0, 2, 4, 6], [1, 3, 5, 7]]
    assert [lay.pp_rank(r) for r in range(8)] == [r % 2 for r in range(8)]
    assert [lay.dp_rank(r) for r in range(8)] == [r // 2 for r in range(8)]


def _table(lay: RankLayout) -> dict[int, tuple[int, int, int]]:
    return {r: (lay.rdp_rank(r), lay.pp_rank(r), lay.tp_rank(r)) for r in range(lay.world_size)}


def test_tp_placement_table_dpt() -> None:
    lay = RankLayout(8, pp=2, tp=2, strategy="DPT")
    assert _table(lay) == {
        0: (0, 0, 0),
        1: (0, 0, 1),
        2: (0, 1, 0),
        3: (0, 1, 1),
        4: (1, 0, 0),
        5: (1, 0, 1),
        6: (1, 1, 0),
        7: (1, 1, 1),
    }
    assert lay.all_groups("T") == [[0, 1], [2, 3], [4, 5], [6, 7]]
    assert lay.all_groups("P") == [[0, 2], [1, 3], [4, 6], [5, 7]]
    assert lay.all_groups("D") == [[0, 4], [1, 5], [2, 6], [3, 7]]
    assert lay.all_groups("DT") == [[0, 1, 4, 5], [2, 3, 6, 7]]


def test_tp_placement_table_ptd() -> None:
    lay = RankLayout(8, pp=2, tp=2, strategy="PTD")
    assert _table(lay) == {
        0: (0, 0, 0),
        1: (1, 0, 0),
        2: (0, 0, 1),
        3: (1, 0, 1),
        4: (0, 1, 0),
        5: (1, 1, 0),
        6: (0, 1, 1),
        7: (1, 1, 1),
    }


def test_four_process_lab_layouts() -> None:
    cluster = RankLayout(4, pp=2, tp=1, strategy="cluster")
    assert [(cluster.pp_rank(r), cluster.dp_rank(r)) for r in range(4)] == [(0, 0), (1, 0), (0, 1), (1, 1)]
    assert cluster.all_groups("P") == [[0, 1], [2, 3]] and cluster.all_groups("D") == [[0, 2], [1, 3]]
    spread = RankLayout(4, pp=2, tp=1, strategy="spread")
    assert [(spread.pp_rank(r), spread.dp_rank(r)) for r in range(4)] == [(0, 0), (0, 1), (1, 0), (1, 1)]


@pytest.mark.parametrize("strategy", ["".join(p) for p in itertools.permutations("DPT")])
@pytest.mark.parametrize(("world", "pp", "tp"), [(8, 2, 2), (12, 3, 2), (8, 4, 1), (6, 1, 3), (4, 2, 1)])
def test_every_permutation_is_a_row_major_mesh(strategy: str, world: int, pp: int, tp: int) -> None:
    lay = RankLayout(world, pp=pp, tp=tp, strategy=strategy)
    sizes = {"D": world // (pp * tp), "P": pp, "T": tp}
    # right-most letter varies fastest over ascending ranks
    expected = list(itertools.product(*(range(sizes[c]) for c in strategy)))
    for r in range(world):
        c = lay.coords(r)
        assert tuple(c[x] for x in strategy) == expected[r]
        assert lay.rank_of(c) == r
        # dp = (D, T) and mp = (P, T) in strategy order (smp's Ranker)
        t_first = strategy.index("T") < strategy.index("D")
        dp = c["D"] + sizes["D"] * c["T"] if t_first else c["T"] + tp * c["D"]
        assert lay.dp_rank(r) == dp
        t_before_p = strategy.index("T") < strategy.index("P")
        mp = c["P"] + pp * c["T"] if t_before_p else c["T"] + tp * c["P"]
        assert lay.mp_rank(r) == mp
    assert lay.group_size("DT") == world // pp and lay.group_size("PT") == pp * tp
    for letters in ("P", "T", "D", "DT", "PT"):
        groups = lay.all_groups(letters)
        assert sorted(itertools.chain.from_iterable(groups)) == list(range(world))
        for g in groups:
            assert [lay.group_rank(r, letters) for r in g] == list(range(len(g)))


def test_bad_layouts() -> None:
    with pytest.raises(ValueError, match="permutation"):
        RankLayout(4, pp=2, tp=1, strategy="DDP")
    with pytest.raises(ValueError, match="multiple"):
        RankLayout(6, pp=4, tp=1, strategy="cluster")
