"""Supervised fine-tuning: ``seqenc fit --data.labels`` trains a label head on the entity readout,
each sample read up to its label's ``as_of``; the bundle keeps the head and ``seqenc embed`` writes
its predictions; the folds are the probe's."""

from __future__ import annotations

import importlib
import json
import os
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest
import torch

from seqenc.bundle import load_bundle, save_bundle
from seqenc.cli import main
from seqenc.data.datamodule import LabelledDataset
from seqenc.data.labels import LabelledRows, labelled_view, read_labels
from seqenc.data.schema import EventSchema
from seqenc.data.sequences import build_sequences
from seqenc.data.spec import DataSpec
from seqenc.data.vocab import Vocabularies, Vocabulary
from seqenc.errors import SeqencError
from seqenc.evaluate import cv_folds, prediction_scores, probe
from seqenc.finetune.build import label_module
from seqenc.finetune.loss import label_score
from seqenc.finetune.plan import (
    MIN_LABEL_STEPS,
    check_label_options,
    class_weights,
    label_schedule,
)
from seqenc.model.encoder import EncoderConfig, SequenceEncoder
from seqenc.model.head import SupervisedHead
from tests.tiny import FIT, SCHEMA, fit, label_fit, tiny_events

SMALL = EncoderConfig(d_model=8, n_heads=2)


@pytest.fixture(scope="module")
def tuned(tmp_path_factory) -> tuple[Path, pd.DataFrame, str]:
    """A fine-tuned bundle on a synthetic log whose label is its latent account type."""
    bundle, _, labels, printed = label_fit(tmp_path_factory.mktemp("finetune"), 300, 24)
    return bundle, labels, printed


def test_the_bundle_keeps_the_head_and_embed_writes_its_predictions(tuned, tmp_path):
    bundle, labels, _ = tuned
    head = json.loads((bundle / "config.json").read_text())["head"]
    assert head["task"] == "classification" and head["classes"] == [0, 1, 2, 3]
    encoder, meta, _ = load_bundle(bundle)
    assert encoder.head is not None and meta.head == head
    out = tmp_path / "emb.parquet"
    main(["embed", "--model", str(bundle), "--events", str(bundle.parents[3] / "events.parquet"),
          "--output", str(out), "--no-progress"])  # fmt: skip
    table = pd.read_parquet(out).merge(labels, on="entity_id")
    probabilities = np.stack(table["probabilities"].to_numpy())
    assert np.allclose(probabilities.sum(1), 1.0, atol=1e-5)
    assert (probabilities.argmax(1) == table["prediction"]).all()
    # the label is a function of the events: the fine-tuned head recovers it
    assert (table["prediction"] == table["account_type"]).mean() > 0.9


def test_a_bundle_without_head_still_loads_and_writes_no_prediction(tmp_path):
    events = tiny_events(20)
    store, vocabs = build_sequences(events, SCHEMA)
    spec = DataSpec(SCHEMA, vocabs, 16)
    config = EncoderConfig(
        d_model=16, n_heads=2, n_layers=1, n_items=spec.n_items, n_positions=17,
        categorical_sizes=spec.categorical_sizes, n_numeric=1,
    )  # fmt: skip
    path = save_bundle(tmp_path / "b", SequenceEncoder(config), spec)
    config_json = json.loads((path / "config.json").read_text())
    del config_json["head"]  # as bundles written before heads existed
    (path / "config.json").write_text(json.dumps(config_json))
    encoder, meta, _ = load_bundle(path)
    assert encoder.head is None and meta.head == {}


def test_init_from_starts_from_the_bundles_encoder_weights_and_shape(tuned, tmp_path, capsys):
    """The bundle's encoder shape wins over options the layered configs set (said in one line)."""
    bundle, labels, _ = tuned
    folder = bundle.parents[3]
    events = pd.read_parquet(folder / "events.parquet")
    events.to_parquet(tmp_path / "events.parquet")
    labels.to_parquet(tmp_path / "labels.parquet")
    start = load_bundle(bundle)
    assert start[1].encoder.ffn_mult != 2 and start[1].encoder.positional == "learned"
    again, printed = fit(
        tmp_path,
        "--data.labels", "labels.parquet",
        "--data.label_column", "account_type",
        "--model.next_item_weight", "0",
        "--model.init_from", str(bundle),
        "--model.lr", "0",
        "--model.label_steps", "3",
        "--model.encoder.ffn_mult", "2",
        "--model.encoder.positional", "none",
    )  # fmt: skip
    assert (
        f"model.encoder.ffn_mult {start[1].encoder.ffn_mult} (the configs': 2); "
        "model.encoder.positional learned (the configs': none)"
    ) in printed
    with pytest.raises(SystemExit):  # a start that is not there: one line naming the option
        fit(tmp_path, "--data.labels", "labels.parquet", "--data.label_column", "account_type",
            "--model.init_from", str(tmp_path / "nowhere"))  # fmt: skip
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("seqenc fit: error: model.init_from: model bundle not found"), err
    tuned_again, meta, _ = load_bundle(again)
    assert meta.encoder.ffn_mult == start[1].encoder.ffn_mult
    for name, value in start[0].state_dict().items():
        if not name.startswith("head."):
            assert torch.equal(value, tuned_again.state_dict()[name]), name


def events_with_labels() -> tuple[pd.DataFrame, pd.DataFrame]:
    events = tiny_events(30)
    as_of = events.groupby("entity_id")["timestamp"].median().dt.floor("s").rename("as_of")
    as_of = as_of.reset_index()
    labels = as_of.assign(y=np.arange(len(as_of)) % 2)
    return events, labels


def test_as_of_hides_later_events():
    """Changing or adding events after a label's as_of changes nothing the model reads."""
    events, labels = events_with_labels()
    cut = events["entity_id"].map(labels.set_index("entity_id")["as_of"])
    later = (events["timestamp"] > cut).to_numpy()
    assert later.any() and not later.all()
    changed = events.copy()
    changed.loc[later, "item_id"] = (changed.loc[later, "item_id"] + 7) % 40
    changed.loc[later, "amount"] = -changed.loc[later, "amount"]
    table = read_labels(labels, "entity_id", "y")
    store, vocabs = build_sequences(events, SCHEMA)
    other, _ = build_sequences(changed, SCHEMA, vocabs=vocabs)
    spec = DataSpec(SCHEMA, vocabs, 64)
    config = EncoderConfig(
        d_model=16, n_heads=2, n_layers=1, n_items=spec.n_items, n_positions=65,
        categorical_sizes=spec.categorical_sizes, n_numeric=1, dropout=0.0,
    )  # fmt: skip
    torch.manual_seed(0)
    encoder = SequenceEncoder(config).eval()
    encoder.head = SupervisedHead(16, **table.spec)
    outputs = []
    for s in (store, other):
        samples = labelled_view(s, table)
        batch, targets = LabelledDataset(samples, 64)[np.arange(len(samples.view))]
        with torch.no_grad():
            outputs.append(encoder.head(encoder.entity_embedding(batch)))
    assert torch.allclose(outputs[0], outputs[1], atol=1e-5)
    newest = store.timestamps[labelled_view(store, table).view.ends - 1]
    assert (newest <= labels["as_of"].map(lambda t: t.timestamp()).to_numpy()).all()


def test_label_table_errors_are_one_line_and_missing_labels_are_dropped(caplog):
    labels = pd.DataFrame({"entity_id": ["a", "b", "c"], "y": [1.0, np.nan, 0.0]})
    table = read_labels(labels, "entity_id", "y")
    assert len(table) == 2 and "1 of 3 rows have no 'y'" in caplog.text
    with pytest.raises(SeqencError, match="no column 'account'"):
        read_labels(labels, "account", "y")
    assert len(read_labels(pd.concat([labels, labels]), "entity_id", "y")) == 2  # repeats
    assert "2 of 6 rows repeat a row of 'y'" in caplog.text  # the null one: dropped
    with pytest.raises(SeqencError, match="different labels"):
        read_labels(pd.concat([labels, labels.assign(y=[0.0, 1.0, 1.0])]), "entity_id", "y")
    with pytest.raises(SeqencError, match="single class"):
        read_labels(labels.assign(y=1), "entity_id", "y")


def test_regression_labels_are_standardised_and_predicted_in_their_unit():
    labels = pd.DataFrame({"entity_id": ["a", "b", "c"], "y": [1.5, 2.5, 5.0]})
    table = read_labels(labels, "entity_id", "y")
    assert table.spec["task"] == "regression" and abs(table.target.mean()) < 1e-6
    head = SupervisedHead(4, **table.spec)
    with torch.no_grad():
        head.linear.weight.zero_()
        head.linear.bias.zero_()
    assert head.predict(head(torch.zeros(2, 4))).tolist() == pytest.approx([3.0, 3.0])


def test_cv_folds_are_the_probes_and_hold_each_row_out_once():
    rng = np.random.default_rng(0)
    y = rng.integers(0, 3, 200)
    x = y[:, None] + rng.normal(size=(200, 2))
    task, codes, _, splits = cv_folds(y)
    held = np.concatenate([test for _, test in splits])
    assert sorted(held) == list(range(200))
    for train, test in splits:
        assert not set(train) & set(test)
    # perfect probabilities score 1 on every fold; the probe's own scores use the same folds
    exact = np.eye(3)[codes]
    assert prediction_scores(task, codes, exact)["accuracy"] == 1.0
    assert probe(x, y).folds["accuracy"].shape == (len(splits),)


def test_a_fine_tuning_fit_prints_its_plan_and_the_aggregates_beside_its_score(tuned):
    printed = tuned[2]
    assert "fine-tuning schedule: 24 steps = 8 epochs of 3 batches over 270 labelled" in printed
    assert "early stopping: val/score on the held-out labelled entities" in printed
    assert "stop after 10 validations without gain" in printed
    model = next(line for line in printed.splitlines() if line.strip().startswith("model "))
    baseline = next(line for line in printed.splitlines() if "aggregates, logistic" in line)
    assert 0.5 < float(model.split()[1]) <= 1.0  # the checkpoint's held-out ROC-AUC
    assert 0.5 < float(baseline.split()[3]) <= 1.0
    assert "fitted on the 270 training rows" in baseline


def test_seqenc_test_on_a_fine_tuned_checkpoint_scores_it_again(tuned, capsys):
    """The label module's checkpoint records what rebuilds it (its options, the encoder's
    configuration): ``seqenc test --ckpt_path`` builds the same module and scores the same."""
    bundle, _, printed = tuned
    folder = bundle.parents[3]
    checkpoint = next(line for line in printed.splitlines() if line.startswith("checkpoint: "))
    model = next(line for line in printed.splitlines() if line.strip().startswith("model "))
    old = Path.cwd()
    os.chdir(folder)
    try:
        main(["test", "--data.path", "events.parquet", *FIT[:8], "--data.labels", "labels.parquet",
              "--data.label_column", "account_type",
              "--ckpt_path", checkpoint.removeprefix("checkpoint: ")])  # fmt: skip
    finally:
        os.chdir(old)
    again = next(line for line in capsys.readouterr().out.splitlines() if "test/score" in line)
    assert float(again.split()[-1]) == pytest.approx(float(model.split()[1]), abs=1e-4)


def test_the_schedule_scales_with_the_labelled_rows_within_its_bounds():
    assert label_schedule(3200, 50, None)[:2] == (12 * 50, 12)
    assert label_schedule(100, 2, None)[:2] == (MIN_LABEL_STEPS, MIN_LABEL_STEPS // 2)
    assert label_schedule(10**6, 800, None)[:2] == (2 * 800, 2)  # the most within 2,000 steps
    assert label_schedule(10**7, 2500, None)[:2] == (2500, 1)  # one epoch where one is longer
    assert label_schedule(3200, 50, 120)[:2] == (150, 3)  # model.label_steps, whole epochs
    assert label_schedule(3200, 50, 120, max_steps=7)[:2] == (7, 1)  # an explicit max_steps
    binary = {"task": "classification", "classes": [0, 1]}
    for steps in (0, -1, 2.5, True):
        with pytest.raises(SeqencError, match="label_steps must be an integer"):
            check_label_options("auto", steps, binary)


def test_class_weights_favour_rare_classes_clipped_and_overridable():
    targets = np.array([0] * 86 + [1] * 14)
    weights, why = class_weights(targets, [0, 1], "auto")
    assert weights.tolist() == pytest.approx([1.0, 86 / 14]) and "1: 6.14" in why
    rare = np.array([0] * 990 + [1] * 5 + [2] * 5)
    assert class_weights(rare, ["a", "b", "c"], "auto")[0].tolist() == [1.0, 10.0, 10.0]
    assert class_weights(targets, [0, 1], "none")[0] is None
    assert class_weights(targets, [0, 1], [1.0, 3.0])[0].tolist() == [1.0, 3.0]
    binary = {"task": "classification", "classes": [0, 1]}
    # checked in the float32 the loss computes in: 1e300 is infinite there, 5e-324 zero; and a
    # bounded ratio (issue 67: 1e300 ended in an AttributeError, 5e-324 in a nan loss)
    bad_weights = ([1.0], [1.0, float("inf")], [1.0, 0.0], [1.0, float("nan")], [1.0, 1e300],
                   [1.0, 5e-324], [1.0, 1e-30], [1e6, 1.0], ["a", 1.0])  # fmt: skip
    for bad in bad_weights:
        with pytest.raises(
            SeqencError, match="2 weights expected .* positive and finite in float32"
        ):
            check_label_options(bad, None, binary)
    check_label_options([1e30, 1e30], None, binary)  # large but equal: the loss is scale-free
    check_label_options([1.0, 1e4], None, binary)
    with pytest.raises(SeqencError, match="must be auto, none or a list"):
        check_label_options("balanced", None, binary)


def test_the_weighted_loss_keeps_the_heads_probabilities_calibrated():
    """Fitted to labels drawn with P(1) = 0.1, the weighted loss's free scores still read 0.1."""
    head = SupervisedHead(4, "classification", classes=[0, 1])
    targets = torch.tensor([1] * 10 + [0] * 90)
    scores = torch.zeros(1, 2, requires_grad=True)
    optimizer = torch.optim.SGD([scores], lr=1.0)
    for _ in range(500):
        optimizer.zero_grad()
        head.loss(scores.expand(100, 2), targets, torch.tensor([1.0, 9.0])).backward()
        optimizer.step()
    assert head.predict(scores.detach())[0, 1].item() == pytest.approx(0.1, abs=1e-3)


def test_the_labelled_score_is_sklearns_roc_auc_and_r2():
    from sklearn.metrics import r2_score, roc_auc_score

    rng = np.random.default_rng(0)
    y = rng.integers(0, 3, 300)
    logits = torch.from_numpy(np.round(rng.normal(size=(300, 3)) + np.eye(3)[y], 1)).float()
    probabilities = torch.softmax(logits, -1).numpy()  # rounded logits: tied scores
    expected = roc_auc_score(y, probabilities, multi_class="ovr")
    assert label_score("classification", logits, torch.from_numpy(y)) == pytest.approx(expected)
    binary = y == 1
    expected = roc_auc_score(binary, torch.softmax(logits[:, :2], -1).numpy()[:, 1])
    got = label_score("classification", logits[:, :2], torch.from_numpy(binary.astype(int)))
    assert got == pytest.approx(expected)
    with pytest.raises(SeqencError, match="ROC-AUC is undefined on 300 row"):  # one class
        label_score("classification", logits[:, :2], torch.zeros(300))
    one = label_score("classification", logits[:2, :2], torch.tensor([0, 1]))  # two rows
    assert one in (0.0, 0.5, 1.0)
    target = rng.normal(size=300)
    guess = target + rng.normal(size=300)
    got = label_score("regression", torch.from_numpy(guess)[:, None], torch.from_numpy(target))
    assert got == pytest.approx(r2_score(target, guess))


def test_without_scikit_learn_the_baseline_is_one_line(monkeypatch, capsys):
    from seqenc.finetune.baseline import LabelBaselines

    estimators = importlib.import_module("seqenc.evaluate.estimators")

    def missing():
        raise SeqencError("seqenc.evaluate.probe needs scikit-learn: pip install 'seqenc[eval]'")

    monkeypatch.setattr(estimators, "sklearn_modules", missing)
    labels = {"task": "classification", "classes": [0, 1], "center": 0.0, "scale": 1.0}
    spec = DataSpec(EventSchema(), Vocabularies(Vocabulary(list(range(10)))), 8, labels=labels)
    held = SimpleNamespace(rows=np.arange(10), targets=np.arange(10) % 2)
    module = label_module(spec, LabelledRows(held, held, as_of=False), encoder=SMALL)
    trainer = SimpleNamespace(is_global_zero=True, callback_metrics={})
    LabelBaselines().on_test_end(trainer, module)
    out = capsys.readouterr().out.splitlines()
    assert out[-1] == (
        "  aggregates baseline: not computed: seqenc.evaluate.probe needs scikit-learn: "
        "pip install 'seqenc[eval]'"
    )


def test_a_fused_bundle_written_before_the_finetune_package_loads_and_predicts_the_same():
    """tests/data/legacy_bundles/fused: a fused, fine-tuned entity model (per-item readout) and
    its embeddings and probabilities of the events beside it, written at commit 120cb74, when
    fine-tuning was a mixin of the next-event module."""
    from seqenc.inference import load_encoder

    root = Path(__file__).parent / "data" / "legacy_bundles" / "fused"
    encoder = load_encoder(root, device="cpu")
    assert encoder.model.head is not None and encoder.model.head.wide is not None
    events = pd.read_parquet(root / "events.parquet")
    got = encoder.encode(events, as_of=pd.Timestamp("2024-06-01"))
    expected = np.load(root / "expected_embeddings.npy")
    np.testing.assert_allclose(np.stack(got["embedding"].to_numpy()), expected, atol=1e-5)
    probabilities = np.stack(got["probabilities"].to_numpy())
    np.testing.assert_allclose(
        probabilities, np.load(root / "expected_probabilities.npy"), atol=1e-5
    )


def test_a_regression_target_constant_on_its_training_rows_is_one_line():
    """Issue 67: the hold-out can take a label table's only other values; the fit then had one
    number to learn and wrote a bundle without a word."""
    labels = {"task": "regression", "classes": [], "center": 1.0, "scale": 1.0}
    spec = DataSpec(EventSchema(), Vocabularies(Vocabulary(list(range(10)))), 8, labels=labels)
    train = SimpleNamespace(rows=np.arange(8), targets=np.zeros(8, dtype=np.float32))
    held = SimpleNamespace(rows=np.arange(2), targets=np.array([1.0, -1.0], dtype=np.float32))
    with pytest.raises(SeqencError, match="one value on all 8 training rows"):
        label_module(spec, LabelledRows(train, held, as_of=False), encoder=SMALL)
    varied = SimpleNamespace(rows=np.arange(8), targets=np.arange(8, dtype=np.float32))
    assert label_module(spec, LabelledRows(varied, held, as_of=False), encoder=SMALL).head.task
