"""Cloze masking statistics, the at-least-one rule, the 80/10/10 rule, next-item targets."""

from __future__ import annotations

import torch

from seqenc.model.masking import IGNORE, mask_items, next_item_targets

MASK, N_SPECIAL, N_ITEMS = 1, 3, 50


def random_batch(n_rows: int, width: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    lengths = torch.randint(0, width + 1, (n_rows,), generator=generator)
    items = torch.randint(N_SPECIAL, N_ITEMS, (n_rows, width), generator=generator)
    items[torch.arange(width)[None, :] >= lengths[:, None]] = 0
    return items, lengths


def test_masks_only_real_positions_at_the_given_rate() -> None:
    items, lengths = random_batch(4000, 40)
    masked, labels = mask_items(items, lengths, 0.2, torch.Generator().manual_seed(1), N_ITEMS)
    real = torch.arange(40)[None, :] < lengths[:, None]
    hit = labels != IGNORE
    assert not (hit & ~real).any()
    assert (labels[hit] == items[hit]).all() and (masked[hit] == MASK).all()
    assert (masked[~hit] == items[~hit]).all()
    long_rows = lengths >= 20  # the at-least-one rule barely moves the rate there
    rate = hit[long_rows].sum() / real[long_rows].sum()
    assert abs(rate.item() - 0.2) < 0.01


def test_at_least_one_mask_per_nonempty_row_uniformly_placed() -> None:
    items, lengths = random_batch(3000, 6, seed=2)
    _, labels = mask_items(items, lengths, 0.0, torch.Generator().manual_seed(3), N_ITEMS)
    per_row = (labels != IGNORE).sum(1)
    assert (per_row == (lengths > 0).long()).all()
    # with prob 0 the forced position is uniform over the real ones: check rows of length 5
    rows = lengths == 5
    positions = (labels[rows] != IGNORE).float().argmax(1)
    counts = torch.bincount(positions, minlength=6)
    assert counts[5] == 0 and (counts[:5] > rows.sum() / 5 * 0.7).all()
    # and with a high probability no row is left unmasked either
    _, labels = mask_items(items, lengths, 0.05, torch.Generator().manual_seed(4), N_ITEMS)
    assert ((labels != IGNORE).sum(1)[lengths > 0] >= 1).all()


def test_replace_rule_80_10_10() -> None:
    items, lengths = random_batch(4000, 40, seed=5)
    masked, labels = mask_items(
        items, lengths, 0.5, torch.Generator().manual_seed(6), N_ITEMS, replace_rule=True
    )
    hit = labels != IGNORE
    inputs = masked[hit]
    as_mask = (inputs == MASK).float().mean().item()
    unchanged = (inputs == items[hit]).float().mean().item()
    assert abs(as_mask - 0.8) < 0.01
    # "random item" lands on the original with probability 1/47, counted as unchanged
    assert abs(unchanged - (0.1 + 0.1 / (N_ITEMS - N_SPECIAL))) < 0.01
    assert ((inputs == MASK) | (inputs >= N_SPECIAL)).all() and (inputs < N_ITEMS).all()
    assert set(inputs[inputs != MASK].unique().tolist()) == set(range(N_SPECIAL, N_ITEMS))


def test_masking_is_deterministic_given_the_generator() -> None:
    items, lengths = random_batch(50, 10)
    a = mask_items(
        items, lengths, 0.3, torch.Generator().manual_seed(9), N_ITEMS, replace_rule=True
    )
    b = mask_items(
        items, lengths, 0.3, torch.Generator().manual_seed(9), N_ITEMS, replace_rule=True
    )
    assert all(torch.equal(x, y) for x, y in zip(a, b, strict=True))


def test_next_item_targets() -> None:
    items = torch.tensor([[5, 6, 7, 0], [8, 0, 0, 0], [0, 0, 0, 0]])
    lengths = torch.tensor([3, 1, 0])
    assert next_item_targets(items, lengths).tolist() == [
        [6, 7, IGNORE, IGNORE],
        [IGNORE] * 4,
        [IGNORE] * 4,
    ]
    with_last = next_item_targets(items, lengths, last_target=torch.tensor([9, 4, 11]))
    assert with_last.tolist() == [[6, 7, 9, IGNORE], [4, IGNORE, IGNORE, IGNORE], [IGNORE] * 4]


def test_last_only_rows_mask_just_the_newest_event() -> None:
    items, lengths = random_batch(4000, 40, seed=7)
    has_events = lengths > 0
    masked, labels = mask_items(
        items, lengths, 0.2, torch.Generator().manual_seed(8), N_ITEMS, True, mask_last_prob=1.0
    )
    rows = torch.arange(len(items))[has_events]
    newest = (lengths - 1)[has_events]
    assert ((labels != IGNORE).sum(1) == has_events.long()).all()
    assert torch.equal(labels[rows, newest], items[rows, newest])
    assert (masked[rows, newest] == MASK).all()  # never replaced by the 80/10/10 rule
    # a mix: with cloze at 0.9 a 40-event row almost never ends with a single mask by chance
    _, labels = mask_items(
        items, lengths, 0.9, torch.Generator().manual_seed(9), N_ITEMS, mask_last_prob=0.25
    )
    long_rows = lengths >= 20
    single = (labels[long_rows] != IGNORE).sum(1) == 1
    assert abs(single.float().mean().item() - 0.25) < 0.03
