"""The sampled catalogue term with each row's own window scored exactly, against naive references:
a per-row loop in float64 (values and gradients), the exact log-softmax when the windows hold the
whole catalogue, and the unbiasedness of the normaliser's estimate over many draws."""

from __future__ import annotations

import math

import pytest
import torch

from seqenc.errors import SeqencError
from seqenc.model.losses import sampled_softmax, target_log_softmax
from seqenc.model.sampled import (
    Proposal,
    distinct_items,
    hits,
    own_scores,
    sample_candidates,
    sampled_log_softmax,
    shared_logsumexp,
)
from seqenc.training.run_options import check_loss_options

N_SPECIAL = 3
N_ITEMS = 23  # 20 real items


def make_case(seed: int = 0, n_rows: int = 11, d: int = 6):
    """Rows in three groups (not sorted by group), each group's window with padding, a repeated
    item and, for group 1, a target that is not in its window (row 3)."""
    gen = torch.Generator().manual_seed(seed)
    hidden = torch.randn(n_rows, d, generator=gen, dtype=torch.float64).float().requires_grad_()
    weight = torch.randn(N_ITEMS, d, generator=gen).requires_grad_()
    group = torch.tensor([0, 1, 0, 1, 2, 2, 0, 1, 2, 0, 1])[:n_rows]
    items = torch.tensor(
        [[5, 7, 7, 9, 0, 0], [4, 8, 11, 15, 8, 0], [3, 20, 21, 22, 6, 6]]
    )  # 0: padding
    targets = torch.tensor([7, 8, 9, 12, 20, 6, 5, 15, 22, 7, 4])[:n_rows]
    return hidden, weight, targets, (group, items)


def reference(hidden, weight, targets, groups, candidates, log_count):
    """Per row, in float64: the exact sum over the row's distinct window items (and its target),
    plus each candidate outside them weighted by ``1 / E[count]``."""
    group, items = groups
    h, w = hidden.double(), weight.double()
    out = []
    for row in range(len(targets)):
        own = {int(i) for i in items[group[row]] if i >= N_SPECIAL} | {int(targets[row])}
        exact = torch.stack([h[row] @ w[j] for j in sorted(own)]).exp().sum()
        rest = [
            (h[row] @ w[c]).exp() / log_count[k].double().exp()
            for k, c in enumerate(candidates.tolist())
            if c not in own
        ]
        total = exact + (torch.stack(rest).sum() if rest else 0.0)
        out.append(h[row] @ w[targets[row]] - total.log())
    return torch.stack(out)


@pytest.mark.parametrize("sampler", ["mixed", "catalogue", "in_batch"])
def test_own_window_estimate_matches_a_per_row_reference_with_gradients(sampler):
    hidden, weight, targets, groups = make_case()
    proposal = Proposal.from_counts(torch.arange(N_ITEMS))
    estimate = sampled_log_softmax(
        hidden, weight, targets, 16, sampler, torch.Generator().manual_seed(5), proposal,
        groups=groups,
    )  # fmt: skip
    candidates, log_count = sample_candidates(
        targets, N_ITEMS, 16, sampler, torch.Generator().manual_seed(5), proposal
    )
    expected = reference(hidden, weight, targets, groups, candidates, log_count)
    torch.testing.assert_close(estimate.double(), expected, rtol=1e-5, atol=1e-5)
    got = torch.autograd.grad(estimate.sum(), (hidden, weight))
    hidden2, weight2 = hidden.detach().requires_grad_(), weight.detach().requires_grad_()
    naive = reference(hidden2, weight2, targets, groups, candidates, log_count)
    want = torch.autograd.grad(naive.sum(), (hidden2, weight2))
    torch.testing.assert_close(got[0].double(), want[0].double(), rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(got[1].to_dense().double(), want[1].double(), rtol=1e-4, atol=1e-5)


def test_windows_holding_the_whole_catalogue_give_the_exact_log_softmax():
    hidden, weight, targets, (group, _) = make_case()
    everything = torch.arange(N_ITEMS).repeat(3, 1)  # the specials among them are padding
    for seed in range(3):  # whatever the candidates: every one of them is in the window
        estimate = sampled_log_softmax(
            hidden, weight, targets, 8, "mixed", torch.Generator().manual_seed(seed),
            groups=(group, everything),
        )  # fmt: skip
        exact = torch.log_softmax(hidden @ weight[N_SPECIAL:].T, 1)
        expected = exact.gather(1, (targets - N_SPECIAL)[:, None])[:, 0]
        torch.testing.assert_close(estimate, expected, rtol=1e-5, atol=1e-5)
        estimate.sum().backward()
        assert torch.isfinite(hidden.grad).all()
        hidden.grad = None


def test_the_normaliser_estimate_is_unbiased():
    """The mean of ``exp(s+ - estimate)`` (the estimated normaliser) over many draws is the exact
    normaliser within 4 standard errors: the window part is exact and the rest an
    importance-sampling sum."""
    hidden, weight, targets, groups = make_case(n_rows=4)
    proposal = Proposal.from_counts(torch.tensor([0, 0, 0] + [40, 1] * 10))
    with torch.no_grad():
        positive = (hidden * weight[targets]).sum(-1).double()
        draws = torch.stack(
            [
                positive
                - sampled_log_softmax(
                    hidden,
                    weight,
                    targets,
                    6,
                    "mixed",
                    torch.Generator().manual_seed(s),
                    proposal,
                    groups=groups,
                ).double()  # fmt: skip
                for s in range(4000)
            ]
        )
        exact = torch.logsumexp((hidden @ weight[N_SPECIAL:].T).double(), 1).exp()
    normaliser = draws.exp()
    error = normaliser.std(0) / len(draws) ** 0.5  # the standard error of the mean
    assert ((normaliser.mean(0) - exact).abs() < 4 * error).all()
    assert (error < 0.03 * exact).all()  # so a bias of 12 % of the normaliser would fail


def test_accidental_hits_are_masked_without_windows():
    """Without windows a candidate equal to the row's target is dropped (the target counted once):
    with one item in the catalogue besides the target, every draw of the target is masked."""
    hidden, weight, targets, groups = make_case(n_rows=4)
    estimate = sampled_log_softmax(
        hidden, weight, targets, 50, "catalogue", torch.Generator().manual_seed(0), own_items=False,
        groups=groups,
    )  # fmt: skip
    candidates, log_count = sample_candidates(
        targets, N_ITEMS, 50, "catalogue", torch.Generator().manual_seed(0)
    )
    empty = (torch.arange(4), torch.zeros(4, 1, dtype=torch.long))  # windows of padding only
    expected = reference(hidden, weight, targets, empty, candidates, log_count)
    torch.testing.assert_close(estimate.double(), expected, rtol=1e-5, atol=1e-5)


def test_own_scores_count_each_window_item_once():
    hidden, weight, _, (group, items) = make_case()
    assert distinct_items(items).tolist() == [
        [5, 7, 9, 0, 0],
        [4, 8, 11, 15, 0],
        [3, 6, 20, 21, 22],
    ]
    scores, distinct = own_scores(hidden, weight, (group, items))
    naive = (hidden[:, None, :] * weight[distinct[group]]).sum(-1)  # [N, M], row by row
    real = distinct[group] >= N_SPECIAL
    torch.testing.assert_close(scores[real], naive[real], rtol=1e-5, atol=1e-6)
    assert torch.isinf(scores[~real]).all()


def test_the_option_through_the_loss_and_its_check():
    hidden, weight, targets, groups = make_case()
    gen = lambda: torch.Generator().manual_seed(1)  # noqa: E731
    rows = sampled_log_softmax(hidden, weight, targets, 8, generator=gen(), groups=groups)
    loss = sampled_softmax(
        hidden, weight, targets, 8, generator=gen(), groups=groups, exact_share=0
    )
    torch.testing.assert_close(loss, -rows.mean())
    through = target_log_softmax(
        hidden, weight, targets, "sampled_softmax", n_negatives=8, generator=gen(), groups=groups,
        exact_share=0.0,
    )  # fmt: skip
    torch.testing.assert_close(through, rows)
    check_loss_options("sampled_softmax", {"own_items": False, "n_negatives": 8}, 20)
    with pytest.raises(SeqencError, match="own_items must be true or false"):
        check_loss_options("sampled_softmax", {"own_items": "yes"}, 20)
    with pytest.raises(SeqencError, match=r"\['groups'\] are not options"):
        check_loss_options("sampled_softmax", {"groups": 1}, 20)


def test_hits_are_the_pairs_a_dense_comparison_finds():
    gen = torch.Generator().manual_seed(2)
    candidates = torch.randint(N_SPECIAL, 40, (64,), generator=gen)
    items = torch.randint(0, 40, (5, 9), generator=gen)  # ids below N_SPECIAL: padding
    group = torch.randint(0, 5, (30,), generator=gen)
    rows, cols = hits(candidates, group, distinct_items(items))  # distinct: each pair once
    dense = (items[group][:, :, None] == candidates[None, None, :]).any(1)
    found = torch.zeros_like(dense)
    found[rows, cols] = True
    assert torch.equal(found, dense) and len(rows) == int(dense.sum())


def test_large_logits_take_the_shifted_path():
    """Logits beyond exp's float32 range: the row maximum is subtracted, values and gradients
    stay those of the float64 reference."""
    hidden, weight, targets, groups = make_case()
    big = (hidden.detach() * 40).requires_grad_()
    estimate = sampled_log_softmax(
        big, weight, targets, 16, "mixed", torch.Generator().manual_seed(5), groups=groups
    )
    candidates, log_count = sample_candidates(
        targets, N_ITEMS, 16, "mixed", torch.Generator().manual_seed(5)
    )
    expected = reference(big, weight, targets, groups, candidates, log_count)
    torch.testing.assert_close(estimate.double(), expected, rtol=1e-4, atol=1e-3)
    estimate.sum().backward()
    assert torch.isfinite(big.grad).all()


def test_uniform_samplers_ignore_the_frequency_proposal():
    """``mixed_uniform``: each candidate's expected count is its share of the batch's targets
    plus a uniform draw's, as for ``mixed`` without a proposal; ``uniform``: K / n_real each."""
    targets = torch.tensor([3, 3, 5, 9])
    proposal = Proposal.from_counts(torch.tensor([0, 0, 0] + [1000] + [0] * 19))
    got = sample_candidates(
        targets, N_ITEMS, 10, "mixed_uniform", torch.Generator().manual_seed(0), proposal
    )
    want = sample_candidates(targets, N_ITEMS, 10, "mixed", torch.Generator().manual_seed(0))
    assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])
    expected = 5 * (targets[None, :] == got[0][:, None]).sum(1) / 4 + 5 / 20
    torch.testing.assert_close(got[1], expected.log().float())
    uniform = sample_candidates(targets, N_ITEMS, 10, "uniform", None, proposal)
    assert (uniform[0] != 3).any()  # the proposal would draw item 3 alone
    torch.testing.assert_close(uniform[1], torch.full((10,), 10 / 20).log())


def test_an_exact_share_of_the_rows_is_exact_and_the_table_gets_a_dense_gradient():
    hidden, weight, targets, groups = make_case()
    exact = torch.log_softmax(hidden @ weight[N_SPECIAL:].T, 1)
    exact = exact.gather(1, (targets - N_SPECIAL)[:, None])[:, 0]
    gen = torch.Generator().manual_seed(0)
    whole = target_log_softmax(
        hidden, weight, targets, "sampled_softmax", n_negatives=4, generator=gen,
        groups=groups, exact_share=1.0,
    )  # fmt: skip
    torch.testing.assert_close(whole, exact, rtol=1e-5, atol=1e-5)
    gen = torch.Generator().manual_seed(0)
    part = target_log_softmax(
        hidden, weight, targets, "sampled_softmax", n_negatives=4, generator=gen,
        groups=groups, exact_share=0.25,
    )  # fmt: skip
    assert int(((part - exact).abs() < 1e-5).sum()) == 3  # ceil(0.25 * 11), the others sampled
    part.sum().backward()
    assert (weight.grad.to_dense()[N_SPECIAL:].abs().sum(1) > 0).all()
    with pytest.raises(SeqencError, match="exact_share must be a number in"):
        check_loss_options("sampled_softmax", {"exact_share": 2}, 20)
    check_loss_options("sampled_softmax", {"exact_share": None}, 20)


def test_the_exact_share_by_default_is_capped_by_the_candidates_cost():
    """``exact_share`` unset: EXACT_SHARE of the rows, or ``n_negatives / n_items`` of them where
    that is fewer (here 2 candidates over 20 items: 0.1 x 11 rows -> 2 exact rows; 1 candidate:
    0.05 x 11 -> 1 row)."""
    hidden, weight, targets, _ = make_case()
    exact = torch.log_softmax(hidden @ weight[N_SPECIAL:].T, 1)
    exact = exact.gather(1, (targets - N_SPECIAL)[:, None])[:, 0]
    for k, rows in ((2, 2), (1, 1)):
        gen = torch.Generator().manual_seed(0)
        out = target_log_softmax(
            hidden, weight, targets, "sampled_softmax", n_negatives=k, generator=gen
        )
        assert int(((out - exact).abs() < 1e-5).sum()) == rows


@pytest.mark.parametrize("scale", [1.0, 30.0])  # 30: past exp's float32 range, the shifted path
def test_shared_logsumexp_matches_a_masked_logsumexp_with_gradients(scale):
    gen = torch.Generator().manual_seed(3)
    hidden = (torch.randn(7, 5, generator=gen) * scale).requires_grad_()
    vectors = torch.randn(9, 5, generator=gen).requires_grad_()
    log_count = torch.randn(9, generator=gen)
    rows, cols = torch.tensor([0, 0, 3, 6] + [5] * 9), torch.tensor([1, 4, 4, 8] + list(range(9)))
    upstream = torch.rand(7, generator=gen)  # a weight per row, as the repeat mixture gives
    got = shared_logsumexp(hidden, vectors, log_count, (rows, cols))
    (got[:5] * upstream[:5]).sum().backward()  # row 5 has every candidate left out: -inf
    h, v = hidden.detach().double().requires_grad_(), vectors.detach().double().requires_grad_()
    logits = (h @ v.T - log_count.double()).index_put(
        (rows, cols), torch.tensor(-math.inf, dtype=torch.float64)
    )
    want = torch.logsumexp(logits, 1)
    (want[:5] * upstream[:5].double()).sum().backward()
    torch.testing.assert_close(got[:5].double(), want[:5], rtol=1e-5, atol=1e-4)
    assert got[5] == -math.inf
    torch.testing.assert_close(hidden.grad.double(), h.grad, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(vectors.grad.double(), v.grad, rtol=1e-4, atol=1e-4)
