"""The next-event LightningModule: an encoder trained with a causal (next item, next basket) or
masked (cloze) objective and its self-supervised terms, evaluated by full ranking."""

from __future__ import annotations

import logging
from dataclasses import asdict
from typing import Any, Literal

import torch
from lightning.pytorch.utilities import rank_zero_info

from seqenc.data.spec import DataSpec
from seqenc.data.split import FitSplits
from seqenc.model.batch import N_SPECIAL, Batch
from seqenc.model.encoder import EncoderConfig, SequenceEncoder
from seqenc.model.objectives import Causal, Masked
from seqenc.model.ranking import NextItemScorer
from seqenc.model.sampled import Proposal
from seqenc.training.baselines import item_counts
from seqenc.training.basket_plan import BasketOptions, describe_baskets, resolve_positives
from seqenc.training.encoder_module import EncoderModule
from seqenc.training.loss_choice import loss_line, recorded_options, resolve_loss, what_trains
from seqenc.training.metrics import BasketMetrics, Ranking, RankingMetrics
from seqenc.training.run_options import REPEAT_SHARE, check_options, resolve_encoder
from seqenc.training.self_supervised import SelfSupervised, Terms, resolve_value_weight

log = logging.getLogger(__name__)
GROUPS = ("masking", "terms", "ranking", "baskets")  # options saved as their fields


class SeqencModule(SelfSupervised, EncoderModule):
    """A sequence encoder trained with a SASRec (causal) or BERT4Rec (masked) objective.

    Args:
        spec: what the model must agree on with the data, from :attr:`SequenceDataModule.spec`
            (the CLI links it): vocabularies, feature columns, ``history_len``, whether there is
            time.
        objective: ``"causal"`` (next item at every position) or ``"masked"`` (cloze), see
            :mod:`seqenc.model.objectives`.
        encoder: the encoder's options (:class:`~seqenc.model.encoder.EncoderConfig`; on the
            command line ``--model.encoder.d_model 64``). The fields the data decides are set from
            ``spec`` (:func:`~seqenc.training.run_options.resolve_encoder`), ``time`` is on when the log has timestamps and
            ``repeat_head`` ``None`` (the default) on for the causal objective when at least
            ``REPEAT_SHARE`` of the events repeat an earlier item of their entity
            (``spec.repeat_share``). :attr:`config` holds the resolved configuration, and so do
            the saved hyper-parameters.
        loss: the catalogue term: ``"ce"`` (full softmax), ``"sampled_softmax"`` (each row's
            window exact, the rest from shared candidates: :mod:`seqenc.model.sampled`), ``"bce"``,
            ``"gbce"``; ``"auto"`` (the default) by the catalogue's size and what the term trains,
            printed at fit (:func:`~seqenc.training.loss_choice.resolve_loss`). Saved resolved. The repeat head takes ``"ce"`` or ``"sampled_softmax"``.
        loss_options: keyword arguments of the loss, e.g. ``{"n_negatives": 4096}`` (see
            :mod:`seqenc.model.losses`).
        masking: cloze masking for the masked objective (:class:`~seqenc.model.objectives.Masked`,
            :func:`~seqenc.model.masking.mask_items`; its ``mask_prob`` also the share of values
            withheld with ``value_weight``); refused where nothing reads it.
        terms: the self-supervised terms and their weights
            (:class:`~seqenc.training.self_supervised.Terms`).
        lr, weight_decay, warmup_steps: AdamW with linear warm-up then cosine decay to 0.
        ranking: the evaluation's cut-offs and seen-item filter
            (:class:`~seqenc.training.metrics.Ranking`).
        baskets: how a next-basket fit trains (:class:`~seqenc.training.basket_plan.BasketOptions`).
        init_from: a bundle whose encoder weights start the training (the CLI reads the data with
            its vocabularies); the architecture options must give its shapes (else one line).
        splits: the data's splits (:attr:`SequenceDataModule.fit_splits
            <seqenc.data.datamodule.SequenceDataModule.fit_splits>`; the CLI links it), read when
            the fit starts: the per-item numeric statistics and the sampled term's proposal come
            from its training events, and the test's baselines from its splits. ``None``: the
            encoder's own statistics and a uniform proposal.

    A label table is fine-tuned by :class:`~seqenc.finetune.module.LabelModule` (the CLI builds
    it when ``data.labels`` is set: :func:`~seqenc.commands.model.fit_model`).
    """

    def __init__(
        self,
        spec: DataSpec,
        objective: Literal["causal", "masked"] = "causal",
        encoder: EncoderConfig = EncoderConfig(),  # noqa: B008 (never mutated)
        loss: Literal["auto", "ce", "sampled_softmax", "bce", "gbce"] = "auto",
        loss_options: dict[str, Any] | None = None,
        masking: Masked = Masked(),  # noqa: B008 (frozen)
        terms: Terms = Terms(),  # noqa: B008 (frozen)
        lr: float = 1e-3,
        weight_decay: float = 0.01,
        warmup_steps: int = 100,
        ranking: Ranking = Ranking(),  # noqa: B008 (frozen)
        baskets: BasketOptions = BasketOptions(),  # noqa: B008 (frozen)
        init_from: str | None = None,
        splits: FitSplits | None = None,
    ) -> None:
        super().__init__()
        # The spec is data, saved by the DataModule's own state_dict, not as a hyperparameter;
        # the groups are saved as their fields (the ``seqenc fit`` options of the same names).
        self.save_hyperparameters(ignore=["spec", "splits", *GROUPS])
        for group in (masking, terms, ranking, baskets):
            self.hparams.update(asdict(group))
        self.spec, self.splits = spec, splits
        self.objective = Causal(spec.baskets) if objective == "causal" else masking
        self.config = resolve_encoder(encoder, spec, self.objective)  # or a checkpoint's dict
        positives = resolve_positives(baskets.basket_positives, self.config)
        self.hparams.basket_positives = positives
        self.hparams.value_weight = resolve_value_weight(terms.value_weight, self.config)
        trains = what_trains(objective, self.config.baskets, positives)
        self.loss, self.loss_reason = resolve_loss(loss, spec.n_items - N_SPECIAL, trains)
        options = dict(self.hparams) | {"loss": self.loss}
        check_options(options, self.config, asdict(Masked()) | asdict(Terms()))
        filter_seen = ranking.filter_seen
        self.filter_seen = spec.repeat_share < REPEAT_SHARE if filter_seen is None else filter_seen
        # Saved resolved: a checkpoint says what was trained, not what the data would pick.
        options = recorded_options(self.loss, loss_options)  # with the defaults: resume keeps them
        self.hparams.update(encoder=asdict(self.config), filter_seen=self.filter_seen)
        self.hparams.update(loss=self.loss, loss_options=options)
        self.encoder = SequenceEncoder(self.config)
        self.proposal: Proposal | None = None  # the sampled term's negatives, at fit start
        # a sampled term reads few rows of the item table: sparse gradients keep its step sparse
        self.encoder.item_embedding.sparse = self.loss == "sampled_softmax"
        self.add_value_head()
        if init_from is not None:
            self.start_from(init_from)
        metrics = BasketMetrics if spec.baskets else RankingMetrics
        self.val_metrics, self.test_metrics = metrics(ranking.ks), metrics(ranking.ks)

    # ---- training -------------------------------------------------------------------------
    def training_step(self, batch: Batch, batch_idx: int) -> torch.Tensor:
        hp = self.hparams
        loss = torch.zeros((), device=self.device)
        if hp.next_item_weight > 0:
            loss = loss + hp.next_item_weight * self.next_item_loss(batch)
        if hp.contrastive_weight > 0:
            contrastive = self.contrastive_loss(batch)
            self.log("train/contrastive", contrastive, batch_size=len(batch))
            loss = loss + hp.contrastive_weight * contrastive
        if hp.value_weight > 0:
            loss = loss + hp.value_weight * self.masked_value_loss(batch)
        self.log("train/loss", loss, prog_bar=True, batch_size=len(batch))
        return loss

    # ---- evaluation -----------------------------------------------------------------------
    def item_scores(self, batch: Batch, filter_seen: bool) -> torch.Tensor:
        """``[B, n_items]`` float32 scores of every item for each history; specials are -inf.

        ``filter_seen`` removes every item of the history, the target included: a repeated
        target is then a miss, so the filter cannot depend on the answer.
        """
        scorer = self.scorer(batch, filter_seen)
        return scorer.scores(0, scorer.n_items)

    def scorer(self, batch: Batch, filter_seen: bool) -> NextItemScorer:
        """The batch's next-item scorer, with the history's items filtered if ``filter_seen``."""
        scorer = self.encoder.next_item_scorer(batch)
        if filter_seen:
            scorer.seen = batch.seen
        return scorer

    def _evaluate(self, batch: Batch, metrics: RankingMetrics | BasketMetrics) -> None:
        """Full ranking of the batch's targets, the catalogue scored a chunk at a time (a target
        basket: every item's score at once)."""
        if batch.target_sets is not None:
            seen = torch.zeros(
                len(batch), self.config.n_items, dtype=torch.bool, device=batch.items.device
            )
            if batch.seen is not None:
                seen[batch.seen[0], batch.seen[1]] = True
            metrics.update(self.item_scores(batch, self.filter_seen), batch.target_sets, seen)
            return
        ranks = self.scorer(batch, self.filter_seen).target_ranks(batch.target)
        repeat = torch.zeros(len(batch), dtype=torch.bool, device=batch.items.device)
        if batch.seen is not None:
            rows, items = batch.seen
            target = batch.target[rows]  # an unknown (UNK) target repeats nothing, as in baselines
            repeat[rows[(items == target) & (target >= N_SPECIAL)]] = True
        metrics.update(None, repeat=repeat, ranks=ranks)

    def validation_step(self, batch: Batch, batch_idx: int) -> None:
        self._evaluate(batch, self.val_metrics)

    def test_step(self, batch: Batch, batch_idx: int) -> None:
        self._evaluate(batch, self.test_metrics)

    def _log_metrics(self, stage: str, metrics: RankingMetrics | BasketMetrics) -> None:
        # Both are of every process's targets already (summed states); sync_dist averages equal
        # values, which keeps them, and is what Lightning asks of a distributed epoch figure.
        values = metrics.compute()
        self.log_dict(
            {f"{stage}/{k}": v for k, v in values.items()}, prog_bar=stage == "val", sync_dist=True
        )
        if stage == "test" and isinstance(metrics, RankingMetrics):  # printed beside baselines
            half_widths = metrics.half_widths()
            self.log_dict({f"test_ci95/{k}": v for k, v in half_widths.items()}, sync_dist=True)
        metrics.reset()

    def on_validation_epoch_end(self) -> None:
        self._log_metrics("val", self.val_metrics)

    def on_test_epoch_end(self) -> None:
        self._log_metrics("test", self.test_metrics)

    def monitored(self) -> set[str]:
        """The metrics validation logs: what a checkpoint or early stopping may monitor."""
        return {f"val/{k}" for k in type(self.val_metrics)(self.hparams.ks).compute()}

    def on_fit_start(self) -> None:
        hp, n_real_items = self.hparams, self.config.n_items - N_SPECIAL
        rank_zero_info(loss_line(self.loss, self.loss_reason, hp.loss_options, n_real_items))
        if line := describe_baskets(self.hparams.basket_positives, self.config):
            rank_zero_info(line)
        if self.value_head is not None:
            rank_zero_info(
                f"masked values: weight {self.hparams.value_weight} (a share model.mask_prob of "
                "the events' numbers withheld and predicted)"
            )
        self.set_numeric_statistics(self.splits)
        if self.loss == "sampled_softmax" and self.splits is not None:
            counts = item_counts(self.splits.train, self.config.n_items)[: self.config.n_items]
            self.proposal = Proposal.from_counts(torch.from_numpy(counts)).to(self.device)
        log.info(
            "evaluation: %s, full ranking over %d items, seen items %s",
            "leave-one-basket-out" if self.spec.baskets else "leave-one-out",
            self.config.n_items - N_SPECIAL,
            "filtered" if self.filter_seen else "kept",
        )
