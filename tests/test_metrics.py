import math

import pytest
import torch

from seqenc.training.metrics import RankingMetrics, target_ranks


def test_ranks_hand_computed():
    scores = torch.tensor([[0.1, 0.9, 0.5, 0.3], [4.0, 3.0, 2.0, 1.0], [1.0, 1.0, 1.0, 1.0]])
    target = torch.tensor([2, 0, 1])
    # row 0: only 0.9 beats 0.5 -> rank 1; row 1: best -> 0; row 2: all tied -> pessimistic, last
    assert target_ranks(scores, target).tolist() == [1, 0, 3]


def test_metrics_hand_computed():
    metric = RankingMetrics(ks=(1, 2))
    # ranks 1, 0, 3 (as above) split over two updates: DDP-style sum states must add up
    metric.update(torch.tensor([[0.1, 0.9, 0.5, 0.3]]), torch.tensor([2]))
    metric.update(torch.tensor([[4.0, 3.0, 2.0, 1.0], [1.0, 1.0, 1.0, 1.0]]), torch.tensor([0, 1]))
    out = metric.compute()
    assert out["hr@1"].item() == pytest.approx(1 / 3)
    assert out["hr@2"].item() == pytest.approx(2 / 3)
    assert out["ndcg@1"].item() == pytest.approx(1 / 3)
    assert out["ndcg@2"].item() == pytest.approx((1 / math.log2(3) + 1) / 3)
    assert out["mrr"].item() == pytest.approx((1 / 2 + 1 + 1 / 4) / 3)


def test_filtered_items_rank_behind():
    scores = torch.tensor([[5.0, -torch.inf, 1.0]])
    assert target_ranks(scores, torch.tensor([2])).item() == 1


def test_metrics_match_naive_sort():
    gen = torch.Generator().manual_seed(0)
    scores = torch.randn(50, 30, generator=gen)
    target = torch.randint(0, 30, (50,), generator=gen)
    metric = RankingMetrics(ks=(10,))
    metric.update(scores, target)
    hits, ndcg = 0.0, 0.0
    for row, t in zip(scores.tolist(), target.tolist(), strict=True):
        order = sorted(range(len(row)), key=lambda i: -row[i])
        rank = order.index(t)
        hits += rank < 10
        ndcg += 1 / math.log2(rank + 2) if rank < 10 else 0.0
    assert metric.compute()["hr@10"].item() == pytest.approx(hits / 50)
    assert metric.compute()["ndcg@10"].item() == pytest.approx(ndcg / 50)


def test_hr_at_1_is_always_reported():
    """The first slot is reported whatever the cut-offs: the share of targets ranked first."""
    metric = RankingMetrics(ks=(10,))
    metric.update(torch.tensor([[0.1, 0.9, 0.5, 0.3], [4.0, 3.0, 2.0, 1.0]]), torch.tensor([2, 0]))
    out = metric.compute()
    assert list(out)[:3] == ["hr@1", "hr@10", "ndcg@10"]
    assert out["hr@1"].item() == pytest.approx(1 / 2)  # ranks 1 and 0


def test_half_widths_are_1_96_standard_errors_of_each_mean():
    gen = torch.Generator().manual_seed(1)
    ranks = torch.randint(0, 30, (200,), generator=gen).double()
    metric = RankingMetrics(ks=(10,))
    metric.update(None, ranks=ranks[:120])
    metric.update(None, ranks=ranks[120:])
    hits = (ranks < 10).double().numpy()
    ndcg = torch.where(ranks < 10, 1 / torch.log2(ranks + 2), 0.0).numpy()
    half = metric.half_widths()
    assert half["hr@10"] == pytest.approx(1.96 * hits.std(ddof=1) / math.sqrt(200), rel=1e-9)
    assert half["ndcg@10"] == pytest.approx(1.96 * ndcg.std(ddof=1) / math.sqrt(200), rel=1e-9)
