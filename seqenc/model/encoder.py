"""The sequence encoder: pre-LN Transformer blocks over event tokens, nanoGPT style.

One model serves both objectives: ``causal=True`` (SASRec, next item at every position) and
``causal=False`` (BERT4Rec, cloze with [MASK] tokens; an entity is encoded by appending one [MASK]
after its history and reading the hidden state there).
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from seqenc.errors import SeqencError
from seqenc.model.attention import SelfAttention, key_padding_mask
from seqenc.model.baskets import basket_mask, basket_pool, basket_positions
from seqenc.model.batch import N_SPECIAL, Batch, drop_events
from seqenc.model.config import (  # EncoderConfig: imported from here by its users too
    SCORED_POOLINGS,
    EncoderConfig,
)
from seqenc.model.dropout import Dropout
from seqenc.model.embeddings import RotaryEmbedding, TokenEmbedding, init_weights
from seqenc.model.head import SupervisedHead
from seqenc.model.item_readout import ItemSummaries
from seqenc.model.linear import linear
from seqenc.model.objectives import readout_objective
from seqenc.model.ranking import NextItemScorer
from seqenc.model.readout import entity_readout, newest_state
from seqenc.model.repeat import RepeatHead, newest_copy


class Block(nn.Module):
    """Pre-LN Transformer block: ``x + Drop(Attn(LN(x)))`` then ``x + Drop(FFN(LN(x)))``."""

    def __init__(self, config: EncoderConfig) -> None:
        super().__init__()
        d, hidden = config.d_model, config.ffn_mult * config.d_model
        self.ln_attn = nn.LayerNorm(d)
        self.attn = SelfAttention(d, config.n_heads, config.attention_dropout)
        self.ln_ffn = nn.LayerNorm(d)
        self.ffn = nn.ModuleDict({"up": nn.Linear(d, hidden), "out": nn.Linear(hidden, d)})
        self.drop = Dropout(config.dropout)

    def forward(
        self,
        x: Tensor,
        causal: bool,
        mask: Tensor | None,
        rope: RotaryEmbedding | None,
        positions: Tensor | None = None,
    ) -> Tensor:
        """``positions``: ``[B, L]`` rotary positions (default ``0 … L-1``)."""
        x = self.attn(self.ln_attn(x), causal, mask, rope, x, self.drop, positions)
        return self.feed_forward(x)

    def newest(self, x: Tensor, rope: RotaryEmbedding | None, lengths: Tensor) -> Tensor:
        """``[B, 1, d]`` the block's output at each row's newest real position only.

        Its query attends to every real key (all precede it, so causal and bidirectional
        attention agree); what the other positions would output is never computed. An empty
        row reads position 0, as :meth:`forward` does.
        """
        rows = torch.arange(x.shape[0], device=x.device)
        last = (lengths - 1).clamp(min=0)
        q, k, v = self.attn.project_newest(self.ln_attn(x), last, rope)
        keys = torch.arange(x.shape[1], device=x.device)[None, :] <= last[:, None]
        y = self.attn.attend(q, k, v, keys[:, None, None, :], causal=False)
        return self.feed_forward(self.attn.merge(y, x[rows, last][:, None], self.drop))

    def extend(
        self,
        x: Tensor,
        past: tuple[Tensor, Tensor],
        write_at: Tensor | None,
        mask: Tensor,
        rope: RotaryEmbedding | None,
        positions: Tensor,
    ) -> Tensor:
        """``[B, M, d]`` the block's output at new positions ``x`` that follow cached ones
        (incremental encoding, :func:`seqenc.model.cache.extend`).

        ``past``: this layer's ``(keys, values)`` ``[B, W, d]`` (heads concatenated, rotary
        positions applied); the new positions' keys and values are written there at ``write_at``
        (``[B, M, d]`` slot indices), or into the first ``M`` slots when ``None`` (nothing cached:
        plain causal attention). ``mask`` ``[B, 1, M, W]``: which slots each new position sees.
        Eval mode.
        """
        q, k, v = self.attn.project(self.ln_attn(x), rope, positions)
        rows, width = x.shape[:2]
        heads = []
        for store, new in zip(past, (k, v), strict=True):
            flat = new.transpose(1, 2).reshape(rows, width, -1)
            if write_at is None:
                store[:, :width] = flat
            else:
                store.scatter_(1, write_at, flat)
            heads.append(self.attn.split_heads(store))
        if write_at is None:  # fused causal kernel over the new positions alone
            y = self.attn.attend(q, k, v, None, causal=True)
        else:
            y = self.attn.attend(q, *heads, mask, causal=False)
        return self.feed_forward(self.attn.merge(y, residual=x))

    def feed_forward(self, x: Tensor) -> Tensor:
        """The second residual branch: ``x + Drop(FFN(LN(x)))``."""
        up, out = self.ffn["up"], self.ffn["out"]
        hidden = linear(self.ln_ffn(x), up.weight, up.bias, gelu=True)
        return linear(hidden, out.weight, out.bias, residual=x, dropout=self.drop)


class SequenceEncoder(nn.Module):
    """Event histories (:class:`~seqenc.model.batch.Batch`) → hidden states and entity embeddings."""

    def __init__(self, config: EncoderConfig) -> None:
        super().__init__()
        if config.n_items == 0:
            raise SeqencError("EncoderConfig: n_items is not set (the data sets it)")
        self.config = config
        self.embed = TokenEmbedding(
            n_items=config.n_items,
            d_model=config.d_model,
            n_positions=config.n_positions,
            learned_positions=config.positional == "learned",
            time=config.time,
            query_time=config.query_time,
            recency=config.recency,
            n_time_buckets=config.n_time_buckets,
            categorical_sizes=config.categorical_sizes,
            n_numeric=config.n_numeric,
            per_item_numeric=config.numeric_scaling == "per_item",
            time_values=bool(config.time and config.time_values),
            item_values=bool(config.item_values),
            causal=config.causal,
            missing_values=bool(config.missing_values and config.n_numeric),
            lean=config.token == "lean",
        )
        self.rope = (
            RotaryEmbedding(config.d_model // config.n_heads, config.n_positions)
            if config.positional == "rope"
            else None
        )
        self.drop = Dropout(config.dropout)
        self.blocks = nn.ModuleList(Block(config) for _ in range(config.n_layers))
        self.ln_final = nn.LayerNorm(config.d_model)
        self.repeat = (
            RepeatHead(
                config.d_model,
                config.n_time_buckets,
                config.time,
                config.query_time,
                counts=bool(config.repeat_counts),
                baskets=config.baskets,
            )
            if config.repeat_head
            else None
        )
        d = config.d_model
        self.pool_score = (
            nn.Sequential(nn.Linear(d, d), nn.Tanh(), nn.Linear(d, 1))
            if config.pooling in SCORED_POOLINGS
            else None
        )
        self.item_summaries = (
            ItemSummaries(d, config.n_items) if config.pooling == "items" else None
        )
        if config.token == "full":  # lean: PyTorch's own start, as built (PAD rows and
            init_weights(self, config.n_layers)  # not-recorded vectors start at zero there too)
        # A fine-tuned model's label head on the entity readout (seqenc.model.head); set by the
        # training module or the bundle loader, saved with the encoder's weights.
        self.head: SupervisedHead | None = None

    @property
    def item_embedding(self) -> nn.Embedding:
        """``[n_items, d]`` item table, PAD row 0; also the (tied) output layer."""
        return self.embed.item

    def forward(self, batch: Batch, newest_only: bool = False) -> Tensor:
        """``[B, L, d]`` hidden states after the final LayerNorm (PAD positions hold junk, finite).

        ``newest_only``: ``[B, 1, d]``, the newest real position's state only; the last block
        then skips every other position (the readout of a last-position embedding needs no more).
        """
        width = batch.items.shape[1]
        if width > self.config.n_positions:
            raise SeqencError(
                f"batch width {width} exceeds the model's n_positions = {self.config.n_positions}; "
                f"feed at most {self.config.n_positions - 1} events per history"
            )
        baskets = self.config.baskets
        positions = basket_positions(batch) if baskets else None
        x = self.drop(self.embed(batch, positions))
        causal = self.config.causal and not baskets
        mask = None if self.config.causal else key_padding_mask(batch.lengths, width)
        if baskets:
            mask = basket_mask(batch)
        *blocks, last = self.blocks
        for block in blocks:
            x = block(x, causal, mask, self.rope, positions)
        if newest_only and not baskets:
            return self.ln_final(last.newest(x, self.rope, batch.lengths))
        x = self.ln_final(last(x, causal, mask, self.rope, positions))
        if baskets:
            x = basket_pool(x, batch)
        if newest_only:
            return newest_state(x, batch.lengths)[:, None]
        return x

    def entity_embedding(self, batch: Batch, traced: bool = False) -> Tensor:
        """``[B, d]`` one vector per history.

        The objective decides where (:meth:`~seqenc.model.objectives.Causal.query`): causal, the hidden
        state at the last real event; bidirectional, at a [MASK] appended after the history. ``pooling="mean"`` averages the real positions instead (including
        the appended MASK when bidirectional); :func:`~seqenc.model.readout.entity_readout` is the
        rule. An empty history gives a finite vector. ``traced``: only the branches a trace can
        follow (:mod:`seqenc.encoding.onnx`): the [MASK] column is always appended and the last block runs
        every position; the same values.
        """
        config = self.config
        if self.training and config.event_dropout > 0:
            batch = drop_events(batch, config.event_dropout)
        query = readout_objective(config.causal, config.baskets).query(
            batch, widen=True if traced else None
        )
        hidden, lengths = self.final_states(query, config.pooling == "last" and not traced)
        scores = None if self.pool_score is None else self.pool_score(hidden)[..., 0]
        summaries = None
        if self.item_summaries is not None:
            summaries = self.item_summaries(hidden, lengths, scores, query.items)
        return entity_readout(hidden, lengths, config.pooling, config.normalize, scores, summaries)

    def final_states(self, batch: Batch, newest_only: bool) -> tuple[Tensor, Tensor]:
        """``(hidden, lengths)`` for the readout: every position's state, or with ``newest_only``
        the newest one's (``[B, 1, d]``, lengths clamped to 1)."""
        hidden = self(batch, newest_only=newest_only)
        return hidden, batch.lengths.clamp(max=1) if newest_only else batch.lengths

    def item_scores(self, batch: Batch) -> Tensor:
        """``[B, n_items]`` float32 score of every item as each history's next event, specials -inf:
        catalogue logits, or with the repeat head the log-probabilities of the mixture. For large
        catalogues use :meth:`next_item_scorer`, which scores them a chunk at a time."""
        return self.next_item_scorer(batch).scores(0, self.config.n_items)

    def next_item_scorer(self, batch: Batch) -> NextItemScorer:
        """What scores every item as each history's next event (:class:`NextItemScorer`).

        The next-item head reads the raw state at the newest position, the one it is trained on,
        whatever the entity readout (``pooling``, ``normalize``) is: one bundle serves both jobs,
        ranking with the next-event head and describing the entity with its own readout."""
        query = readout_objective(self.config.causal, self.config.baskets).query(batch)
        hidden, lengths = self.final_states(query, newest_only=self.repeat is None)
        state = newest_state(hidden, lengths).float()
        weight = self.item_embedding.weight
        if self.repeat is None:
            return NextItemScorer(state, weight)
        with torch.autocast(state.device.type, enabled=False):
            copy, log_g, log_not_g = newest_copy(self.repeat, hidden.float(), query)
        return NextItemScorer(state, weight, query.items, copy, log_g, log_not_g)

    def item_logits(self, hidden: Tensor) -> Tensor:
        """``[..., n_items]`` dot-product scores against the tied item table; the 3 special ids get -inf."""
        logits = hidden @ self.item_embedding.weight.T
        special = torch.arange(logits.shape[-1], device=logits.device) < N_SPECIAL
        return logits.masked_fill(special, float("-inf"))
