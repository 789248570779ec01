"""Losses against naive references: full CE (values and gradients), sampled softmax, BCE, gBCE."""

from __future__ import annotations

import inspect
import math

import pytest
import torch
import torch.nn.functional as F

from seqenc.errors import SeqencError
from seqenc.model.losses import (
    LOSSES,
    bce_one_negative,
    compute_loss,
    full_softmax_ce,
    gbce,
    loss_options,
    sampled_softmax,
    target_log_softmax,
)
from seqenc.model.sampled import (
    ITEM_GRADIENT,
    N_NEGATIVES,
    Proposal,
    sample_candidates,
    sampled_log_softmax,
)

N_SPECIAL = 3


def make_case(
    n_rows: int = 13, n_items: int = 29, d: int = 8, seed: int = 0
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    hidden = torch.randn(n_rows, d, generator=generator, requires_grad=True)
    weight = torch.randn(n_items, d, generator=generator, requires_grad=True)
    targets = torch.randint(N_SPECIAL, n_items, (n_rows,), generator=generator)
    targets[[1, 5]] = -100  # ignored
    targets[7] = 2  # UNK: ignored too
    return hidden, weight, targets


def naive_ce(hidden: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    keep = targets >= N_SPECIAL
    return F.cross_entropy(hidden[keep] @ weight[N_SPECIAL:].T, targets[keep] - N_SPECIAL)


@pytest.mark.parametrize("chunk_size", [None, 1, 4, 100])
@pytest.mark.parametrize("scale", [1.0, 30.0])  # 30: logits beyond exp's range, max-shifted path
def test_full_ce_matches_naive_with_gradients(chunk_size: int | None, scale: float) -> None:
    hidden, weight, targets = make_case()
    hidden = (hidden * scale).detach().requires_grad_()
    loss = full_softmax_ce(hidden, weight, targets, chunk_size=chunk_size)
    grads = torch.autograd.grad(loss * 2.5, (hidden, weight))
    expected = naive_ce(hidden, weight, targets)
    expected_grads = torch.autograd.grad(expected * 2.5, (hidden, weight))
    torch.testing.assert_close(loss, expected, rtol=1e-5, atol=1e-5)
    for got, want in zip(grads, expected_grads, strict=True):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    assert (grads[1][:N_SPECIAL] == 0).all() and (grads[0][[1, 5, 7]] == 0).all()


def test_full_ce_without_grad_and_with_no_rows() -> None:
    hidden, weight, targets = make_case()
    with torch.no_grad():
        torch.testing.assert_close(
            full_softmax_ce(hidden, weight, targets), naive_ce(hidden, weight, targets)
        )
    empty = full_softmax_ce(hidden, weight, torch.full_like(targets, -100))
    assert empty.item() == 0.0
    empty.backward()
    assert (hidden.grad == 0).all()


@pytest.mark.parametrize("how", ["autocast", "matmul_dtype"])
def test_full_ce_in_bf16(how: str) -> None:
    """bf16 output-layer matmuls, from CPU autocast or from the loss option alone."""
    hidden, weight, targets = make_case(n_rows=64, n_items=300, d=32)
    option = {"matmul_dtype": "bfloat16"} if how == "matmul_dtype" else {}
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=how == "autocast"):
        loss = full_softmax_ce(hidden, weight, targets, chunk_size=16, **option)
        grads = torch.autograd.grad(loss, (hidden, weight))
    assert loss.dtype == torch.float32 and grads[0].dtype == torch.float32
    # reference: bf16 logits, float32 softmax, the way the fused path computes them
    keep = targets >= N_SPECIAL
    logits = (hidden[keep].bfloat16() @ weight[N_SPECIAL:].bfloat16().T).float()
    reference = F.cross_entropy(logits, targets[keep] - N_SPECIAL)
    torch.testing.assert_close(loss, reference, rtol=1e-5, atol=1e-5)
    exact = naive_ce(hidden, weight, targets)
    exact_grads = torch.autograd.grad(exact, (hidden, weight))
    torch.testing.assert_close(loss, exact, rtol=2e-2, atol=2e-2)
    for got, want in zip(grads, exact_grads, strict=True):
        torch.testing.assert_close(got, want, rtol=5e-2, atol=5e-3)


def logq_reference(
    hidden: torch.Tensor,
    weight: torch.Tensor,
    targets: torch.Tensor,
    negatives: torch.Tensor,
    q: torch.Tensor,
) -> torch.Tensor:
    """-s+ + log(e^{s+} + sum over negatives j != target of e^{s_j} / (K q_j)), in float64."""
    keep = targets >= N_SPECIAL
    h, t = hidden[keep].double(), targets[keep]
    w = weight.double()
    pos = (h * w[t]).sum(-1)
    terms = torch.exp(h @ w[negatives].T) / (len(negatives) * q[None, :])
    terms = terms * (negatives[None, :] != t[:, None])
    return (-pos + torch.log(torch.exp(pos) + terms.sum(-1))).mean()


def test_sampled_softmax_uniform_matches_reference() -> None:
    hidden, weight, targets = make_case()
    loss = sampled_softmax(
        hidden, weight, targets, 50, "catalogue", torch.Generator().manual_seed(3), exact_share=0
    )
    negatives = torch.randint(N_SPECIAL, 29, (50,), generator=torch.Generator().manual_seed(3))
    assert (negatives[None] == targets[:, None]).any()  # the case has accidental hits to remove
    q = torch.full((50,), 1 / 26, dtype=torch.float64)
    expected = logq_reference(hidden, weight, targets, negatives, q)
    torch.testing.assert_close(loss.double(), expected, rtol=1e-5, atol=1e-5)


def test_sampled_softmax_in_batch_uses_batch_frequencies() -> None:
    hidden, weight, targets = make_case()
    targets[[0, 2, 3]] = 9  # a frequent item
    loss = sampled_softmax(
        hidden, weight, targets, 40, "in_batch", torch.Generator().manual_seed(4), exact_share=0
    )
    kept = targets[targets >= N_SPECIAL]
    negatives = kept[torch.randint(0, len(kept), (40,), generator=torch.Generator().manual_seed(4))]
    q = torch.tensor(
        [(kept == j).sum().item() / len(kept) for j in negatives.tolist()], dtype=torch.float64
    )
    expected = logq_reference(hidden, weight, targets, negatives, q)
    torch.testing.assert_close(loss.double(), expected, rtol=1e-5, atol=1e-5)


def test_sampled_softmax_approaches_full_ce_with_many_samples() -> None:
    hidden, weight, targets = make_case(n_items=15)
    generator = torch.Generator().manual_seed(0)
    approx = sampled_softmax(
        hidden, weight, targets, 200_000, "catalogue", generator, exact_share=0
    )
    torch.testing.assert_close(approx, naive_ce(hidden, weight, targets), rtol=0, atol=0.02)


def test_bce_one_negative_formula() -> None:
    hidden, weight, targets = make_case()
    loss = bce_one_negative(hidden, weight, targets, torch.Generator().manual_seed(5))
    keep = targets >= N_SPECIAL
    t = targets[keep]
    draws = torch.randint(N_SPECIAL, 28, (len(t), 1), generator=torch.Generator().manual_seed(5))[
        :, 0
    ]
    negatives = torch.where(draws >= t, draws + 1, draws)  # uniform over the real items except t
    pos = (hidden[keep] * weight[t]).sum(-1)
    neg = (hidden[keep] * weight[negatives]).sum(-1)
    expected = -(torch.log(torch.sigmoid(pos)) + torch.log(1 - torch.sigmoid(neg))).mean()
    torch.testing.assert_close(loss, expected, rtol=1e-5, atol=1e-5)


def test_negatives_never_hit_the_positive_and_cover_the_rest() -> None:
    n_items = 8
    hidden = torch.zeros(2000, 4, requires_grad=True)
    weight = torch.zeros(n_items, 4)
    weight[:, 0] = torch.arange(n_items, dtype=torch.float32)  # score of item j = j * hidden[:, 0]
    targets = torch.full((2000,), 5)
    loss = bce_one_negative(hidden, weight, targets, torch.Generator().manual_seed(0))
    (grad,) = torch.autograd.grad(loss, hidden)
    # d loss / d hidden[:, 0] = -0.5 * 5 + 0.5 * negative  (sigmoid(0) = 0.5) → recovers each negative
    negatives = ((grad[:, 0] * 2000 + 2.5) / 0.5).round().long()
    assert set(negatives.tolist()) == {3, 4, 6, 7}


def test_gbce_formula_and_special_cases() -> None:
    hidden, weight, targets = make_case()
    k, t_cal = 4, 0.75
    loss = gbce(hidden, weight, targets, k, t_cal, torch.Generator().manual_seed(6))
    keep = targets >= N_SPECIAL
    tg = targets[keep]
    draws = torch.randint(N_SPECIAL, 28, (len(tg), k), generator=torch.Generator().manual_seed(6))
    negatives = torch.where(draws >= tg[:, None], draws + 1, draws)
    alpha = k / (26 - 1)
    beta = alpha * (t_cal * (1 - 1 / alpha) + 1 / alpha)
    pos = torch.sigmoid((hidden[keep] * weight[tg]).sum(-1))
    neg = torch.sigmoid(torch.einsum("nd,nkd->nk", hidden[keep], weight[negatives]))
    expected = (-torch.log(pos**beta) - torch.log(1 - neg).sum(-1)).mean()
    torch.testing.assert_close(loss, expected, rtol=1e-5, atol=1e-5)
    # t = 0 with one negative is SASRec's BCE
    torch.testing.assert_close(
        gbce(hidden, weight, targets, 1, 0.0, torch.Generator().manual_seed(1)),
        bce_one_negative(hidden, weight, targets, torch.Generator().manual_seed(1)),
    )


def test_full_ce_rejects_an_unknown_matmul_dtype() -> None:
    hidden, weight, targets = make_case()
    with pytest.raises(SeqencError, match="matmul_dtype='fp8'"):
        full_softmax_ce(hidden, weight, targets, matmul_dtype="fp8")


def test_compute_loss_by_name() -> None:
    hidden, weight, targets = make_case()
    assert set(LOSSES) == {"ce", "sampled_softmax", "bce", "gbce"}
    torch.testing.assert_close(
        compute_loss("ce", hidden, weight, targets), naive_ce(hidden, weight, targets)
    )
    for name in ("sampled_softmax", "gbce"):
        value = compute_loss(
            name, hidden, weight, targets, n_negatives=5, generator=torch.Generator()
        )
        assert torch.isfinite(value) and value.requires_grad
    with pytest.raises(SeqencError, match="unknown loss 'softmax'"):
        compute_loss("softmax", hidden, weight, targets)
    with pytest.raises(SeqencError, match="n_negatives"):
        compute_loss("bce", hidden, weight, targets, n_negatives=3)
    with pytest.raises(SeqencError, match="sampler"):
        sampled_softmax(hidden, weight, targets, 5, sampler="popularity")


def test_loss_options_name_each_option_with_its_default() -> None:
    assert loss_options("gbce") == {"n_negatives": 256, "t": 0.75, "generator": None}
    assert loss_options("bce") == {"generator": None}
    assert set(loss_options("ce")) == {"chunk_size", "matmul_dtype"}
    sampled = loss_options("sampled_softmax")
    assert sampled["sampler"] == "mixed" and sampled["exact_share"] is None
    assert not {"hidden", "weight", "targets"} & set(sampled)


def test_the_sampled_terms_options_are_one_list() -> None:
    """sampled_softmax's options are sampled_log_softmax's (but the exact rows' table_gradient),
    in their order, then the exact rows' own: one list, in seqenc/model/sampled.py."""
    sampled = list(inspect.signature(sampled_log_softmax).parameters)[3:]
    assert sampled[-1] == "table_gradient"
    assert list(loss_options("sampled_softmax")) == [*sampled[:-1], "exact_share", "item_gradient"]
    assert loss_options("sampled_softmax") == {
        "n_negatives": N_NEGATIVES,
        "sampler": "mixed",
        "generator": None,
        "proposal": None,
        "own_items": True,
        "groups": None,
        "exact_share": None,
        "item_gradient": ITEM_GRADIENT,
    }
    with pytest.raises(TypeError, match="table_gradient"):
        sampled_softmax(*make_case(), table_gradient=False)


@pytest.mark.parametrize("name", sorted(LOSSES))
def test_every_loss_handles_no_rows(name: str) -> None:
    hidden, weight, targets = make_case()
    loss = compute_loss(name, hidden, weight, torch.full_like(targets, -100))
    assert loss.item() == 0.0 and not math.isnan(loss.item())
    loss.backward()


def test_mixed_sampler_weights_each_candidate_by_its_expected_count_under_both_proposals():
    hidden, weight, targets = make_case()
    targets[[0, 2, 3]] = 9
    gen = torch.Generator().manual_seed(4)
    loss = sampled_softmax(hidden, weight, targets, 40, "mixed", gen, exact_share=0)
    kept = targets[targets >= N_SPECIAL]
    gen = torch.Generator().manual_seed(4)
    from_batch = kept[torch.randint(0, len(kept), (20,), generator=gen)]
    uniform = torch.randint(N_SPECIAL, 29, (20,), generator=gen)
    negatives = torch.cat([from_batch, uniform])
    # balance heuristic: E[copies of j] = 20 * count_j / N + 20 / 26, written as K * q_j
    q = torch.tensor(
        [((kept == j).sum().item() / len(kept) + 1 / 26) / 2 for j in negatives.tolist()],
        dtype=torch.float64,
    )
    expected = logq_reference(hidden, weight, targets, negatives, q)
    torch.testing.assert_close(loss.double(), expected, rtol=1e-5, atol=1e-5)


def test_sampled_item_gradients_are_sparse_rows():
    hidden, weight, targets = make_case()
    sampled_softmax(
        hidden, weight, targets, 8, "mixed", torch.Generator().manual_seed(1), exact_share=0
    ).backward()
    assert weight.grad.is_sparse
    touched = set(weight.grad.coalesce().indices()[0].tolist())
    assert touched <= set(range(N_SPECIAL, 29)) and len(touched) < 29 - N_SPECIAL


def test_target_log_softmax_exact_and_sampled_estimate():
    hidden, weight, targets = make_case(n_items=15)
    keep = targets >= N_SPECIAL
    h, t = hidden[keep], targets[keep]
    exact = target_log_softmax(h, weight, t, "ce")
    naive = torch.log_softmax(h @ weight[N_SPECIAL:].T, 1).gather(1, (t - N_SPECIAL)[:, None])[:, 0]
    torch.testing.assert_close(exact, naive, rtol=1e-5, atol=1e-5)
    gen = torch.Generator().manual_seed(0)
    estimate = target_log_softmax(
        h, weight, t, "sampled_softmax", n_negatives=100_000, generator=gen, exact_share=0
    )
    torch.testing.assert_close(estimate, naive, rtol=0, atol=0.03)
    with pytest.raises(SeqencError, match="normalised catalogue term"):
        target_log_softmax(h, weight, t, "gbce")


def test_frequency_proposal_draws_in_proportion_and_corrects_by_its_probabilities():
    counts = torch.tensor([0, 0, 0, 99, 0, 15, 3])  # ids 0-2 are special: never drawn
    proposal = Proposal.from_counts(counts)
    weights = (counts.double() + 1) ** 0.75
    weights[:N_SPECIAL] = 0
    torch.testing.assert_close(proposal.probs, weights / weights.sum())
    draws = proposal.draw(200_000, torch.Generator().manual_seed(0), torch.device("cpu"))
    share = torch.bincount(draws, minlength=7).double() / len(draws)
    torch.testing.assert_close(share, proposal.probs, rtol=0, atol=0.005)
    targets = torch.tensor([3, 3, 5])
    gen = torch.Generator().manual_seed(1)
    candidates, log_count = sample_candidates(targets, 7, 6, "mixed", gen, proposal)
    # 3 draws from the batch's targets, 3 from the proposal: E[copies of j] under both
    expected = (
        3 * (targets[None, :] == candidates[:, None]).sum(1) / 3 + 3 * proposal.probs[candidates]
    )
    torch.testing.assert_close(log_count, expected.log().float())
