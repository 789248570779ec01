"""Input token vectors: item, position, time-gap and event-feature embeddings, plus rotary positions.

A token vector is the sum of its parts (item, learned position, time-gap buckets, each categorical
feature, a linear map of the numeric features), so every part is optional without changing shapes.
A number not recorded (NaN) reads as its item's typical one plus its column's not-recorded vector
(:meth:`TokenEmbedding.add_values`).
The time gaps are causal-safe: ``dt_prev`` (the gap from the previous event) and the query gap (from
the event to the time its position predicts for, see :attr:`~seqenc.model.batch.Batch.query_gaps`).
``recency`` (the gap to the reference time) exists only to load bundles written before the query
gap replaced it: inside a training window it told each position when the window ends.
The item embedding is **not** scaled by ``sqrt(d)``: it is tied with the output layer and initialised
with a small std (nanoGPT style), so the other parts add on the same scale.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from seqenc.errors import SeqencError
from seqenc.model.batch import Batch
from seqenc.model.linear import eager_inference

TIME_BUCKET_WIDTH = 0.301  # each bucket covers a factor e^0.301 ≈ 1.35 of the gap
# Largest set of tables summed through one cached copy at inference (an item table of about
# 130,000 rows at d=128); larger ones are looked up one by one rather than copied.
MAX_PACKED_BYTES = 64 * 2**20
Z_CLIP = 8.0  # a standardised value beyond this many scales says no more than "extreme"


def time_bucket(dt: Tensor, n_buckets: int) -> Tensor:
    """Log bucket of a time gap in seconds: ``clamp(floor(ln(max(1, dt)) / 0.301), 0, n_buckets - 1)``."""
    logs = dt.float().clamp(min=1.0).log_().div_(TIME_BUCKET_WIDTH)  # in place: [B, L, L] inputs
    return logs.floor_().long().clamp_(0, n_buckets - 1)


def signed_log(x: Tensor) -> Tensor:
    """``sign(x) * log1p(|x|)``: squashes heavy-tailed numeric features (amounts, counts) to a sane range."""
    return torch.sign(x) * torch.log1p(x.abs())


class TokenEmbedding(nn.Module):
    """Sum of the per-event embeddings of a right-padded batch.

    PAD positions get the PAD item vector (zero) and a dedicated zero time bucket; their other parts
    are irrelevant because no real position ever attends to them. ``lean`` (the lean token,
    :attr:`~seqenc.model.config.EncoderConfig.token`): no gap tables, and with per-item values no
    shared map of the raw values.
    """

    def __init__(
        self,
        n_items: int,
        d_model: int,
        n_positions: int,
        learned_positions: bool,
        time: bool,
        query_time: bool,
        recency: bool,
        n_time_buckets: int,
        categorical_sizes: tuple[int, ...],
        n_numeric: int,
        per_item_numeric: bool = False,
        time_values: bool = False,
        item_values: bool = False,
        causal: bool = True,
        missing_values: bool = False,
        lean: bool = False,
    ) -> None:
        super().__init__()
        self.item = nn.Embedding(n_items, d_model, padding_idx=0)
        self.position = nn.Embedding(n_positions, d_model) if learned_positions else None
        self.n_time_buckets = n_time_buckets

        def gap_table(on: bool) -> nn.Embedding | None:  # bucket n_time_buckets: PAD, zero
            pad = n_time_buckets
            return nn.Embedding(pad + 1, d_model, padding_idx=pad) if on else None

        self.dt_prev = gap_table(time and not lean)
        self.dt_query = gap_table(time and query_time and not lean)
        self.dt_ref = gap_table(time and recency)
        self.categorical = nn.ModuleList(nn.Embedding(size, d_model) for size in categorical_sizes)
        self.n_numeric = n_numeric
        # the shared map of every value's signed log; a lean token leaves values to the per-item
        # MLP where there is one
        shared = n_numeric and not (lean and per_item_numeric)
        self.numeric = nn.Linear(n_numeric, d_model) if shared else None
        self.value = None
        if n_numeric and per_item_numeric:
            # Centre and scale of each item's signed-log values (set from the training events by
            # set_numeric_stats, saved with the weights); until then every item reads as the same.
            self.register_buffer("numeric_center", torch.zeros(n_items, n_numeric))
            self.register_buffer("numeric_scale", torch.ones(n_items, n_numeric))
            width = n_numeric + (d_model if item_values else 0)
            self.value = nn.Sequential(
                nn.Linear(width, d_model), nn.GELU(), nn.Linear(d_model, d_model)
            )
        self.item_values = item_values and self.value is not None
        # One vector per numeric column, added where its value was not recorded (NaN); zero at
        # the start (init_weights), so an unrecorded value first reads as its item's typical one.
        self.missing = (
            nn.Parameter(torch.zeros(n_numeric, d_model)) if n_numeric and missing_values else None
        )
        self.causal = causal
        self.time = (
            nn.Sequential(nn.Linear(3, d_model), nn.GELU(), nn.Linear(d_model, d_model))
            if time_values
            else None
        )
        self._packed: tuple[tuple, Tensor, Tensor] | None = None  # see packed_tables

    def forward(self, batch: Batch, positions: Tensor | None = None) -> Tensor:
        """``[B, L, d]`` token vectors of ``batch`` (before dropout): each event's
        :meth:`content` plus its place in the history, :meth:`context`.

        ``positions``: ``[B, L]`` position of each token in its history (default ``0 … L-1``; an
        incremental encode passes the positions after the cached ones)."""
        return self.content(batch).add_(self.context(batch, positions))

    def content(self, batch: Batch) -> Tensor:
        """``[B, L, d]`` what each event is: its item, categorical features and numeric values."""
        items, categorical, numeric = batch.items, batch.categorical, batch.numeric
        if len(self.categorical) != categorical.shape[-1]:
            raise SeqencError(
                f"batch has {categorical.shape[-1]} categorical feature columns, the model was built "
                f"for {len(self.categorical)} (EncoderConfig.categorical_sizes)"
            )
        lookups = [(self.item, items)]
        for column, embedding in enumerate(self.categorical):
            lookups.append((embedding, categorical[..., column]))
        x = self.summed_lookups(lookups)
        if numeric.shape[-1] != self.n_numeric:
            raise SeqencError(
                f"batch has {numeric.shape[-1]} numeric feature columns, the model was built for "
                f"{self.n_numeric} (EncoderConfig.n_numeric)"
            )
        if self.n_numeric:
            self.add_values(x, numeric, items)
        return x

    def add_values(self, x: Tensor, numeric: Tensor, items: Tensor) -> None:
        """Add to ``x`` what the events' numeric values say. A value not recorded (NaN) says
        nothing of a number: it reads as its item's centre (0 without per-item statistics), so
        its standardised value is 0, and its column's not-recorded vector (:attr:`missing`) is
        added, so that it was not recorded stays visible."""
        unrecorded = torch.isnan(numeric)
        logs = signed_log(torch.where(unrecorded, torch.zeros_like(numeric), numeric))
        if self.value is not None:
            logs = torch.where(unrecorded, self.numeric_center[items].to(logs.dtype), logs)
        if self.numeric is not None:
            x.add_(self.numeric(logs))
        if self.value is not None:
            z = self.standardised(logs, items)
            if self.item_values:
                z = torch.cat([z, self.item(items)], dim=-1)
            x.add_(self.value(z))
        if self.missing is not None:
            x.add_(unrecorded.to(self.missing.dtype) @ self.missing)

    def context(self, batch: Batch, positions: Tensor | None = None) -> Tensor:
        """``[B, L, d]`` where each token stands: its position and its time inputs (gap buckets,
        continuous time values); zero when the model has none."""
        items, padding_mask = batch.items, batch.padding_mask
        lookups = []
        if self.position is not None:
            if positions is None:
                positions = torch.arange(items.shape[1], device=items.device)
            lookups.append((self.position, positions.expand_as(items)))
        pad = torch.full_like(items, self.n_time_buckets)
        for table, gaps in (
            (self.dt_prev, batch.dt_prev),
            (self.dt_query, batch.query_gaps if self.dt_query is not None else None),
            (self.dt_ref, batch.dt_ref),
        ):
            if table is not None:
                buckets = torch.where(padding_mask, time_bucket(gaps, self.n_time_buckets), pad)
                lookups.append((table, buckets))
        d = self.item.embedding_dim
        x = self.summed_lookups(lookups) if lookups else items.new_zeros(*items.shape, d).float()
        if self.time is not None:
            x.add_(self.time(self.time_values(batch)))
        return x

    def time_values(self, batch: Batch) -> Tensor:
        """``[B, L, 3]`` continuous time inputs, 0 on PAD: ``log1p`` of the hours since the
        history's first event, and, without causal attention, ``log1p`` of the hours to the query
        time (``as_of``; the newest position's time plus :attr:`~Batch.query_gap`) and the event's
        place between the first event and the query time (0 … 1). A causal model gets zeros for
        the last two: inside a training window they would tell each position when it ends."""
        dt_ref = batch.dt_ref.double()
        since_first = (dt_ref[:, :1] - dt_ref).clamp(min=0)
        columns = [torch.log1p(since_first / 3600.0)]
        if self.causal:
            columns += [torch.zeros_like(dt_ref)] * 2
        else:
            newest = dt_ref.gather(1, (batch.lengths - 1).clamp(min=0)[:, None])
            to_query = (dt_ref - newest).clamp(min=0) + batch.query_gap.double()[:, None]
            span = (since_first + to_query)[:, :1].clamp(min=1.0)
            columns += [torch.log1p(to_query / 3600.0), since_first / span]
        values = torch.stack(columns, dim=-1) * batch.padding_mask[..., None]
        return values.to(self.time[0].weight.dtype)

    def standardised(self, logs: Tensor, items: Tensor) -> Tensor:
        """``[B, L, n_numeric]`` signed-log values in units of their item's scale from its centre,
        clipped to ``±Z_CLIP``."""
        z = (logs - self.numeric_center[items]) / self.numeric_scale[items]
        return z.clamp(-Z_CLIP, Z_CLIP)

    def set_numeric_stats(self, center: Tensor, scale: Tensor) -> None:
        """Store each item's ``[n_items, n_numeric]`` centre and (positive) scale of signed-log values."""
        if self.value is None:
            raise SeqencError("numeric statistics need numeric_scaling='per_item'")
        with torch.no_grad():
            self.numeric_center.copy_(center)
            self.numeric_scale.copy_(scale)

    def summed_lookups(self, lookups: list[tuple[nn.Embedding, Tensor]]) -> Tensor:
        """``[*shape, d]`` the sum of every ``table(index)``, ``shape`` the first index's (the
        others broadcast to it).

        At eager inference with small tables this is one ``embedding_bag`` over a cached
        concatenation of the tables, a single pass that writes each token vector once (faster than
        a gather and an add per table); the sum is taken in
        the same order, so the values are the same. Otherwise (training, tracing, export, large
        tables, whose copy would cost memory) each table is looked up and added in place.
        """
        tables = [table.weight for table, _ in lookups]
        packed = self.packed_tables(tables) if eager_inference() else None
        if packed is None:
            x = lookups[0][0](lookups[0][1])  # a fresh tensor no backward needs: add in place
            for table, index in lookups[1:]:
                x.add_(table(index))
            return x
        table, offsets = packed
        shape = lookups[0][1].shape
        index = torch.stack([index.expand(shape) for _, index in lookups], dim=-1) + offsets
        return F.embedding_bag(index.view(-1, len(lookups)), table, mode="sum").view(*shape, -1)

    def packed_tables(self, tables: list[Tensor]) -> tuple[Tensor, Tensor] | None:
        """``(concatenation, row offset of each table)``, rebuilt when a table changes (its
        storage or version counter); ``None`` when the copy would exceed ``MAX_PACKED_BYTES`` or
        a table has no version counter (created under ``torch.inference_mode``)."""
        size = sum(t.numel() * t.element_size() for t in tables)
        if size > MAX_PACKED_BYTES or any(t.is_inference() for t in tables):
            return None
        key = tuple((t.data_ptr(), t._version, t.shape, t.dtype, t.device) for t in tables)
        if self._packed is None or self._packed[0] != key:
            with torch.no_grad():
                sizes = torch.tensor([0] + [len(t) for t in tables[:-1]], device=tables[0].device)
                self._packed = (key, torch.cat(tables), sizes.cumsum(0))
        return self._packed[1:]


class RotaryEmbedding(nn.Module):
    """Rotary position embedding (RoPE) applied to queries and keys by position index.

    Channel ``i`` of the first half and channel ``i`` of the second half of each head form a pair
    rotated by angle ``position * base^(-2i / head_dim)``, so ``q_m · k_n`` depends only on ``m - n``.
    """

    def __init__(self, head_dim: int, n_positions: int, base: float = 10000.0) -> None:
        super().__init__()
        if head_dim % 2:
            raise SeqencError(f"rotary positions need an even head dimension, got {head_dim}")
        inv_freq = base ** (-torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim)
        angles = torch.arange(n_positions, dtype=torch.float64)[:, None] * inv_freq[None, :]
        self.register_buffer("cos", angles.cos().float(), persistent=False)
        self.register_buffer("sin", angles.sin().float(), persistent=False)

    def forward(self, x: Tensor, positions: Tensor | None = None) -> Tensor:
        """Rotate ``x`` of shape ``[B, H, L, head_dim]`` by its position along ``L``, or by
        ``positions`` (``[B, L]``) when given."""
        if positions is None:
            length = x.shape[-2]
            cos, sin = self.cos[:length], self.sin[:length]
        else:
            cos, sin = self.cos[positions][:, None], self.sin[positions][:, None]
        first, second = x.float().chunk(2, dim=-1)
        rotated = torch.cat([first * cos - second * sin, first * sin + second * cos], dim=-1)
        return rotated.to(x.dtype)


def init_weights(module: nn.Module, n_layers: int) -> None:
    """nanoGPT initialisation: N(0, 0.02) for linear and embedding weights, zero biases, PAD
    rows and not-recorded vectors (:attr:`TokenEmbedding.missing`, set without a draw, so the
    other weights are drawn as in a model without them)."""
    for name, param in module.named_parameters():
        if name.endswith("bias") or name.rsplit(".", 1)[-1] == "missing":
            nn.init.zeros_(param)
        elif param.dim() >= 2:
            # Residual output projections get a smaller std so the residual stream starts near identity.
            std = 0.02 / math.sqrt(2 * n_layers) if name.endswith("out.weight") else 0.02
            nn.init.normal_(param, mean=0.0, std=std)
    for sub in module.modules():
        if isinstance(sub, nn.Embedding) and sub.padding_idx is not None:
            with torch.no_grad():
                sub.weight[sub.padding_idx].zero_()
