"""The LightningModule's training targets, evaluation scores and schedule."""

from dataclasses import replace

import pytest
import torch

from seqenc.commands.model import fit_model
from seqenc.data.schema import EventSchema
from seqenc.data.spec import DataSpec
from seqenc.data.vocab import Vocabularies, Vocabulary
from seqenc.errors import SeqencError
from seqenc.model.batch import Batch
from seqenc.model.encoder import EncoderConfig
from seqenc.model.masking import IGNORE
from seqenc.model.objectives import Causal
from seqenc.model.optim import RowSparseAdamW

# 10 real items + 3 specials = 13 ids, with time, no event features
SPEC = DataSpec(EventSchema(), Vocabularies(Vocabulary(list(range(10)))), history_len=8)

SMALL = EncoderConfig(d_model=8, n_heads=2)


def causal_targets(batch):
    return Causal().training_pair(batch, SPEC.n_items)


def _batch(items, lengths, target=None, seen=None):
    items = torch.tensor(items)
    b, width = items.shape
    return Batch(
        items=items,
        lengths=torch.tensor(lengths),
        dt_prev=torch.zeros(b, width),
        dt_ref=torch.zeros(b, width),
        categorical=torch.zeros(b, width, 0, dtype=torch.long),
        numeric=torch.zeros(b, width, 0),
        index=torch.arange(b),
        target=None if target is None else torch.tensor(target),
        seen=None if seen is None else torch.tensor(seen),
    )


def test_causal_targets_shift_by_one():
    inputs, labels = causal_targets(_batch([[5, 6, 7, 8], [9, 10, 0, 0]], [4, 2]))
    assert inputs.lengths.tolist() == [3, 1]
    assert labels.tolist() == [[6, 7, 8, IGNORE], [10, IGNORE, IGNORE, IGNORE]]


def test_causal_inputs_measure_recency_from_the_newest_input():
    times = torch.tensor([[0.0, 10.0, 40.0, 100.0], [5.0, 7.0, 0.0, 0.0]])
    reference = torch.tensor([[100.0], [7.0]])  # each window's newest event (a target)
    batch = _batch([[5, 6, 7, 8], [9, 10, 0, 0]], [4, 2])
    batch.dt_ref = (reference - times) * batch.padding_mask
    inputs, _ = causal_targets(batch)
    # newest inputs are events 2 (t=40) and 0 (t=5): the targets' times never reach the inputs
    assert inputs.dt_ref.tolist() == [[40.0, 30.0, 0.0, 0.0], [0.0, 0.0, 0.0, 0.0]]


def test_item_scores_filter_every_seen_item_target_included():
    module = fit_model(SPEC, encoder=SMALL).eval()
    # row 0 saw items 5 and 6, its target 6 is a repeat; row 1 saw 9
    batch = _batch([[5, 6], [9, 0]], [2, 1], target=[6, 4], seen=[[0, 0, 1], [5, 6, 9]])
    with torch.no_grad():
        raw = module.encoder.item_logits(module.encoder.entity_embedding(batch))
        scores = module.item_scores(batch, filter_seen=True)
    assert torch.isinf(scores[:, :3]).all()
    assert scores[0, 5] == -torch.inf and scores[1, 9] == -torch.inf
    assert scores[0, 6] == -torch.inf  # honest: a repeated target is filtered like any seen item
    assert scores[0, 7] == raw[0, 7]
    unfiltered = module.item_scores(batch, filter_seen=False)
    assert torch.isfinite(unfiltered[:, 3:]).all()


def test_evaluation_counts_repeated_targets_and_misses_them_when_filtered():
    module = fit_model(SPEC, encoder=SMALL, filter_seen=True).eval()
    # every target repeats an item of its history
    batch = _batch([[5, 6], [9, 0]], [2, 1], target=[6, 9], seen=[[0, 0, 1], [5, 6, 9]])
    with torch.no_grad():
        module._evaluate(batch, module.test_metrics)
    values = module.test_metrics.compute()
    assert values["hr@10"] == 0 and values["repeat_targets"] == 1.0


def test_defaults_follow_the_share_of_repeats():
    plain = fit_model(SPEC, encoder=SMALL)
    assert plain.filter_seen and plain.encoder.repeat is None
    repeats = DataSpec(SPEC.schema, SPEC.vocabs, history_len=8, repeat_share=0.5)
    causal = fit_model(repeats, encoder=SMALL)
    assert not causal.filter_seen and causal.encoder.repeat is not None
    masked = fit_model(repeats, objective="masked", encoder=SMALL)
    assert not masked.filter_seen and masked.encoder.repeat is None


def test_training_step_runs_both_objectives():
    torch.manual_seed(0)
    batch = _batch([[5, 6, 7, 8, 9], [10, 11, 12, 0, 0]], [5, 3])
    for objective, repeat in (("causal", False), ("masked", False), ("causal", True)):
        module = fit_model(SPEC, objective=objective, encoder=replace(SMALL, repeat_head=repeat))
        loss = module.training_step(batch, 0)
        loss.backward()
        assert torch.isfinite(loss) and loss > 0
        assert module.encoder.item_embedding.weight.grad.abs().sum() > 0


def test_auto_loss_is_sampled_from_the_threshold_and_its_step_is_row_sparse(monkeypatch):
    """``loss: auto`` by catalogue size (the threshold moved to 10 real items here), saved
    resolved; under the sampled term without exact rows (``exact_share: 0``) the item table gets a
    sparse gradient, which the module's clipping and optimiser take, and the step changes only the
    rows the batch read; with its default exact rows every real item's row gets a gradient (also
    when every row's normaliser trains the table: ``item_gradient: all_rows``)."""
    import seqenc.training.loss_choice as loss_choice

    assert fit_model(SPEC, encoder=SMALL).loss == "ce"
    monkeypatch.setattr(loss_choice, "SAMPLED_FROM_ITEMS", 10)
    torch.manual_seed(0)
    batch = _batch([[5, 6, 7, 8, 9], [10, 11, 12, 0, 0]], [5, 3])
    for repeat in (False, True):
        for options in (None, {"item_gradient": "all_rows"}):  # the table from every row
            encoder = replace(SMALL, repeat_head=repeat)
            default = fit_model(SPEC, encoder=encoder, loss_options=options)
            default.training_step(batch, 0).backward()
            assert (default.encoder.item_embedding.weight.grad[3:].abs().sum(1) > 0).all()
        sparse = {"exact_share": 0.0}
        module = fit_model(
            SPEC, encoder=replace(SMALL, repeat_head=repeat), lr=0.1, loss_options=sparse
        )
        assert module.loss == module.hparams.loss == "sampled_softmax"
        assert "10 items >= 10" in module.loss_reason
        module.training_step(batch, 0).backward()
        grad = module.encoder.item_embedding.weight.grad
        assert grad.is_sparse
        module.configure_gradient_clipping(None, 1.0, "norm")
        before = module.encoder.item_embedding.weight.detach().clone()
        optimizer = RowSparseAdamW(module.parameters(), lr=0.1)
        optimizer.step()
        moved = (module.encoder.item_embedding.weight.detach() != before).any(1)
        assert set(moved.nonzero()[:, 0].tolist()) <= set(grad.coalesce().indices()[0].tolist())
        assert moved[5:13].all() and not moved[:3].any()
    explicit = fit_model(SPEC, encoder=SMALL, loss="ce")
    assert explicit.loss == "ce" and explicit.loss_reason == "set by model.loss"


def test_time_is_off_when_the_log_has_no_timestamps():
    untimed = DataSpec(EventSchema(timestamp=None), SPEC.vocabs, history_len=8)
    module = fit_model(untimed, encoder=replace(SMALL, time=True))
    assert not module.config.time and not module.config.query_time


def test_shape_options_are_exactly_the_options_that_change_the_weights():
    """``SHAPE_OPTIONS`` (refused when resuming) against the models themselves: each of them
    changes the weights' names or shapes in some configuration (``numeric_scaling``: with numeric
    features), except ``n_heads``, which changes how the same weights are read;
    no other option of the signature or of the encoder's does, in either configuration (the
    masking options with the masked objective, where they apply)."""
    import inspect

    from seqenc.commands.model import fit_model
    from seqenc.training.run_options import ENCODER_FIELDS, FROM_DATA, SHAPE_OPTIONS

    def shapes(spec: DataSpec = SPEC, **options) -> dict:
        encoder = EncoderConfig(**{k: v for k, v in options.items() if k in ENCODER_FIELDS})
        rest = {k: v for k, v in options.items() if k not in ENCODER_FIELDS}
        module = fit_model(spec, encoder=encoder, **rest)
        return {k: v.shape for k, v in module.state_dict().items()}

    values = {
        "objective": ("causal", "masked"), "d_model": (16, 32), "n_layers": (2, 3),
        "n_heads": (2, 4), "ffn_mult": (4, 2), "dropout": (0.1, 0.5),
        "attention_dropout": (0.0, 0.5), "positional": ("learned", "rope"), "time": (True, False),
        "query_time": (True, False), "repeat_head": (False, True),
        "repeat_counts": (False, True),
        "n_time_buckets": (64, 32), "numeric_scaling": ("global", "per_item"), "pooling": ("last", "attention"),
        "normalize": (False, True),
        "loss": ("ce", "bce"), "loss_options": (None, {"chunk_size": 4}), "mask_prob": (0.2, 0.5),
        "replace_rule": (True, False), "mask_last_prob": (0.0, 0.5),
        "next_item_weight": (1.0, 0.5), "contrastive_weight": (0.0, 1.0),
        "contrastive_temperature": (0.1, 0.5), "contrastive_min_share": (0.5, 0.3),
        "lr": (1e-3, 0.1), "weight_decay": (0.01, 0.5), "warmup_steps": (100, 7),
        "filter_seen": (None, True), "ks": ((10, 20), (5,)),
        "class_weights": ("auto", "none"), "label_steps": (None, 10),
        "time_values": (None, False), "item_values": (None, False),
        "event_dropout": (0.0, 0.1), "missing_values": (None, False),
        "fusion": ("none", "aggregates"), "value_weight": (0.0, 1.0),
        "token": ("full", "lean"),
    }  # fmt: skip
    options = [
        p
        for p in inspect.signature(fit_model).parameters
        # init_from: tests/test_finetune.py; basket_positives and basket_steps need a basket log
        # and only pick the loss's terms (tests/test_purchases.py) and the schedule
        # (tests/test_basket_plan.py); labelled and splits are the data's, handed by the CLI
        if p
        not in (
            "spec",
            "encoder",
            "init_from",
            "basket_positives",
            "basket_steps",
            "labelled",
            "splits",
        )  # fmt: skip
    ]
    # the data decides the others (and recency: only bundles written before query_time have it)
    options += sorted(ENCODER_FIELDS - set(FROM_DATA))
    assert sorted(options) == sorted(values)  # a new option must be classified here
    changes = set()
    numeric = DataSpec(EventSchema(numeric=["amount"]), SPEC.vocabs, history_len=8)
    layout = {"spec": {}, "names": ["n", "m"], "center": [0.0, 0.0], "scale": [1.0, 1.0]}
    binary = {
        "task": "classification", "classes": [0, 1], "center": 0.0, "scale": 1.0,
        "aggregates": layout,
    }  # fmt: skip
    labelled = DataSpec(SPEC.schema, SPEC.vocabs, 8, labels=binary)  # label options need labels
    for base in ({}, {"spec": numeric}):
        for name in options:
            # the cloze options and the entity model's read the masked objective
            masking = name in (
                "mask_prob", "replace_rule", "mask_last_prob", "time_values", "item_values",
            )  # fmt: skip
            where = {**base, "objective": "masked"} if masking else base
            where = (
                {**where, "spec": labelled}
                if name in ("class_weights", "label_steps", "fusion")
                else where
            )
            if name in ("contrastive_temperature", "contrastive_min_share"):  # read with the loss
                where = {**where, "contrastive_weight": 1.0}
            if name == "numeric_scaling":  # per_item needs numeric columns
                where = {**where, "spec": numeric}
            if name == "value_weight":  # masked values need numbers read per item
                where = {**where, "spec": numeric, "numeric_scaling": "per_item"}
            where = {**where, "repeat_head": True} if name == "repeat_counts" else where
            a, b = ({**where, name: value} for value in values[name])
            if shapes(**a) != shapes(**b):
                changes.add(name)
    assert changes | {"n_heads"} == set(SHAPE_OPTIONS)


@pytest.mark.parametrize(
    "options, words",
    [
        (
            {"encoder": replace(SMALL, repeat_head=True), "loss_options": {"label_smoothing": 0.1}},
            "model.loss_options would be ignored: the repeat head's mixture",
        ),
        (
            {"encoder": replace(SMALL, repeat_head=True), "loss": "bce"},
            "needs a normalised catalogue",
        ),
        ({"mask_prob": 0.3}, "model.mask_prob would be ignored"),
        ({"objective": "masked", "encoder": replace(SMALL, repeat_head=True)}, "needs the causal"),
        (
            {"encoder": replace(SMALL, n_items=99)},
            "model.encoder.n_items is set from the data's item vocabulary (13",
        ),
        ({"encoder": replace(SMALL, n_positions=50)}, "set from data.history_len + 1 (9 here)"),
        ({"encoder": replace(SMALL, recency=True)}, "model.encoder.recency"),
        (
            {"encoder": replace(SMALL, repeat_head=False, repeat_counts=True)},
            "model.encoder.repeat_counts reads the repeat head's purchases",
        ),
        ({"basket_positives": "some"}, "model.basket_positives must be 'one', 'all' or 'auto'"),
        ({"basket_positives": "all"}, "model.basket_positives all trains on next baskets"),
    ],
)
def test_an_option_that_would_be_ignored_is_refused_in_one_line(options, words):
    with pytest.raises(SeqencError) as info:
        fit_model(SPEC, **{"encoder": SMALL, **options})
    assert words in str(info.value) and "\n" not in str(info.value)


def test_hyper_parameters_are_saved_resolved():
    """``time``, ``repeat_head`` and ``filter_seen`` as the data resolved them, never None; the
    saved encoder builds the same model again (Lightning's load_from_checkpoint path)."""
    repeats = DataSpec(SPEC.schema, SPEC.vocabs, history_len=8, repeat_share=0.5)
    module = fit_model(repeats, encoder=SMALL)
    hp = module.hparams
    assert hp.filter_seen is False
    assert (hp.encoder["time"], hp.encoder["repeat_head"]) == (True, True)
    assert (hp.encoder["n_items"], hp.encoder["n_positions"]) == (13, 9)
    again = fit_model(repeats, encoder=dict(hp.encoder))
    assert again.config == module.config
