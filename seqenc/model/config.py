"""What a :class:`~seqenc.model.encoder.SequenceEncoder` is built from: its architecture, the
fields the data decides, and their one-line checks."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from seqenc.errors import SeqencError
from seqenc.integers import integer
from seqenc.model.batch import N_SPECIAL

POSITIONALS = ("learned", "rope", "none")
POOLINGS = ("last", "mean", "attention", "items")
# The poolings that weigh the states by a learned score (``SequenceEncoder.pool_score``).
SCORED_POOLINGS = ("attention", "items")
NUMERIC_SCALINGS = ("global", "per_item")
INITS = ("gpt", "fan_in")


@dataclass
class EncoderConfig:
    """Architecture of a :class:`SequenceEncoder`.

    The fields the data decides (``n_items``, ``n_positions``, ``categorical_sizes``,
    ``n_numeric``) and ``causal`` (the objective's) are set by :class:`~seqenc.training.module.SeqencModule`
    from the data; ``n_items=0`` means not set yet, and a model cannot be built from it.

    Attributes:
        n_items: item vocabulary size including the 3 specials (PAD=0, MASK=1, UNK=2).
        dropout: on embeddings and residual branches.
        attention_dropout: on the attention probabilities, in training only (the original SASRec's
            regulariser for short, sparse histories).
        n_positions: position capacity: the position tables' rows, so a batch is at most this
            wide. A model fed ``history_len`` events holds ``history_len + 1`` (the appended
            [MASK], or the training window's extra event); the default fits the DataModule's
            default ``history_len`` of 200.
        positional: ``"learned"`` position embeddings, ``"rope"`` rotary q/k, or ``"none"``.
        time: the switch for every time input: learned embeddings of the log-bucketed gap from the
            previous event (``dt_prev``) and the options below.
        query_time: (with ``time``) each position also gets the gap to the time it predicts for
            (:attr:`~seqenc.model.batch.Batch.query_gaps`).
        time_bias: (with ``time``) a learned per-head, per-layer attention bias over log-bucketed
            ``|t_i - t_j|`` (TiSASRec / HSTU style); SDPA then cannot use the Flash kernel.
        repeat_head: score items of the entity's own history by a copy attention mixed in through
            a learned gate (:mod:`seqenc.model.repeat`); needs ``causal``. ``None`` (the default):
            :class:`~seqenc.training.module.SeqencModule` decides from the data; a bare encoder has none.
        repeat_counts: (with ``repeat_head``) the copy attention reads each history item's number
            of purchases and the time since its newest one (:func:`~seqenc.model.repeat.purchase_features`:
            one key per item, a learned bias per cell of the two log buckets) instead of scoring
            every past event alone. ``None`` (the default):
            :class:`~seqenc.training.module.SeqencModule` decides (on with the repeat head); a
            bare encoder and bundles and checkpoints written without the field have it off.
        recency: the gap to the reference time as an input, as bundles written before
            ``query_time`` had; never for new models (it leaks the window's end in training).
        categorical_sizes: vocabulary size of each categorical event feature.
        n_numeric: number of numeric event features (signed-log transformed inside the model).
        numeric_scaling: how a numeric value is read. ``"global"``: one linear map of its signed
            log, the same for every item. ``"per_item"``: besides that, the value standardised by
            its item's statistics (centre and scale of the signed log, learned on the training
            events and stored with the weights) through a small MLP, so a heart rate of 80 and a
            lactate of 2 each say how unusual they are for their item. ``None`` (the default):
            :class:`~seqenc.training.module.SeqencModule` decides from the data; a bundle written
            without the field reads ``"global"``.
        missing_values: (with ``n_numeric``) one learned vector per numeric column, added to an
            event whose value in that column was not recorded (null / NaN; the value itself then
            reads as its item's centre), so that it was not recorded is visible; zero at the
            start. ``None`` (the default): on when the log has numeric columns, set by
            :class:`~seqenc.training.module.SeqencModule`; a bundle written without the field has
            none (its unrecorded values read as their item's centre alone).
        causal: ``False`` for bidirectional (BERT4Rec) attention.
        pooling: entity embedding from the ``"last"`` position, the ``"mean"`` of real positions,
            or their ``"attention"``-weighted sum (a learned score per position,
            :func:`~seqenc.model.readout.attention_pool`); ``"items"`` adds to that a learned
            summary of each frequent item's events (:mod:`seqenc.model.item_readout`).
        time_values: (with ``time``; ``None``: on without causal attention, set by
            :class:`~seqenc.training.module.SeqencModule`; a bundle without the field has none) besides the buckets, continuous time through a small MLP:
            each event's time since the history's first event and, without causal attention, its
            time to the reference time (``as_of``) and its place in that span
            (:meth:`~seqenc.model.embeddings.TokenEmbedding.time_values`).
        item_values: (with ``numeric_scaling="per_item"``; ``None`` like ``time_values``) the value MLP reads the item's
            embedding beside the standardised value, so a value means what it means for its item.
        group_times: (bidirectional, with ``time``) the events that share a time are one token
            (:mod:`seqenc.model.groups`): attention over the history's distinct times, each
            event reading its group's state. Off unless set (``None``): faster, but it mixes the
            events of a time into one vector.
        event_dropout: in training, the share of each history's events the entity readout drops
            (:func:`~seqenc.model.batch.drop_events`): a regulariser for label heads trained on a
            few thousand rows.
        raw_values: (with ``numeric_scaling="per_item"``) keep the shared linear map of every
            value's signed log beside the per-item value MLP; ``False``: the value MLP alone reads
            the value, in its item's units (a shared map mixes the units of every item). Without
            per-item values the shared map is the only reader and stays.
        gap_buckets: (with ``time``) the learned tables of log-bucketed gaps (``dt_prev``, and the
            query gap with ``query_time``); ``False`` leaves time to the continuous values
            (``time_values``) alone.
        init: ``"gpt"``: nanoGPT's N(0, 0.02) weights (:func:`~seqenc.model.embeddings.init_weights`);
            ``"fan_in"``: PyTorch's own (linear layers uniform within 1/sqrt(fan-in), tables
            N(0, 1)), under which the value and time MLPs are nonlinear in a standardised input
            from the first step. Only a new model's start: a bundle's weights replace it.
        normalize: L2-normalise the entity embedding.
        baskets: (causal only) the basket rule of :mod:`seqenc.model.baskets`: events that share a
            time are a set; set from the data (``data.baskets``). Without it the fused causal
            kernel runs.
    """

    n_items: int = 0
    d_model: int = 128
    n_layers: int = 2
    n_heads: int = 2
    ffn_mult: int = 4
    dropout: float = 0.2
    attention_dropout: float = 0.0
    n_positions: int = 201
    positional: str = "learned"
    time: bool = True
    query_time: bool = True
    time_bias: bool = False
    repeat_head: bool | None = None
    repeat_counts: bool | None = None
    recency: bool = False
    n_time_buckets: int = 64
    categorical_sizes: tuple[int, ...] = ()
    n_numeric: int = 0
    numeric_scaling: str | None = None
    missing_values: bool | None = None
    causal: bool = True
    pooling: str = "last"
    normalize: bool = False
    baskets: bool = False
    time_values: bool | None = None
    item_values: bool | None = None
    event_dropout: float = 0.0
    group_times: bool | None = None
    raw_values: bool = True
    gap_buckets: bool = True
    init: str = "gpt"

    def __post_init__(self) -> None:
        self.categorical_sizes = tuple(int(size) for size in self.categorical_sizes)
        for name in (
            "d_model",
            "n_heads",
            "n_layers",
            "ffn_mult",
        ):  # sizes first: d_model % n_heads
            given = getattr(self, name)  # a Python int once checked (numpy's accepted)
            if integer(given) is None or given < 1:
                raise SeqencError(f"EncoderConfig: {name}={given!r} must be a whole number >= 1")
            setattr(self, name, int(given))
        checks = [
            (
                self.n_items > N_SPECIAL or self.n_items == 0,
                f"n_items={self.n_items} must exceed the {N_SPECIAL} special ids",
            ),
            (
                self.d_model % self.n_heads == 0,
                f"d_model={self.d_model} not divisible by n_heads={self.n_heads}",
            ),
            (
                self.positional in POSITIONALS,
                f"positional={self.positional!r} not in {POSITIONALS}",
            ),
            (self.pooling in POOLINGS, f"pooling={self.pooling!r} not in {POOLINGS}"),
            (self.init in INITS, f"init={self.init!r} not in {INITS}"),
            (
                not self.item_values or self.numeric_scaling in (None, "per_item"),
                "item_values needs numeric_scaling='per_item'",
            ),
            (
                self.numeric_scaling in (None, *NUMERIC_SCALINGS),
                f"numeric_scaling={self.numeric_scaling!r} not in {NUMERIC_SCALINGS}",
            ),
            (0.0 <= self.dropout < 1.0, f"dropout={self.dropout} not in [0, 1)"),
            (
                0.0 <= self.event_dropout < 1.0,
                f"event_dropout={self.event_dropout} not in [0, 1)",
            ),
            (
                0.0 <= self.attention_dropout < 1.0,
                f"attention_dropout={self.attention_dropout} not in [0, 1)",
            ),
            (
                self.n_positions >= 2 and self.n_layers >= 1,
                f"n_positions={self.n_positions} must be >= 2 and n_layers={self.n_layers} >= 1",
            ),
            (self.n_time_buckets >= 1, f"n_time_buckets={self.n_time_buckets} must be >= 1"),
            (self.causal or not self.repeat_head, "repeat_head needs the causal objective"),
            (self.causal or not self.baskets, "baskets needs the causal objective"),
            (
                all(s >= 1 for s in self.categorical_sizes),
                f"categorical_sizes={self.categorical_sizes} must be >= 1",
            ),
        ]
        for ok, message in checks:
            if not ok:
                raise SeqencError(f"EncoderConfig: {message}")

    @staticmethod
    def upgrade(saved: dict[str, Any]) -> dict[str, Any]:
        """A saved configuration's fields with today's names: one written before the lengths were
        named (bundle format 1, older checkpoints) holds ``max_len``, the longest history, which is
        ``n_positions - 1``; one written before ``missing_values`` has no not-recorded vectors, one
        written before ``repeat_counts`` no purchase counts."""
        saved = {"missing_values": False, "repeat_counts": False} | saved
        if not isinstance(saved.get("max_len"), int):
            return saved
        rest = {k: v for k, v in saved.items() if k != "max_len"}
        return rest | {"n_positions": saved["max_len"] + 1}
