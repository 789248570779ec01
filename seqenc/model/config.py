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
TOKENS = ("full", "lean")
# Options taken out, with what they were and why: a saved configuration with one of them off loads
# as before; one trained with it on holds a model seqenc no longer builds.
REMOVED = {
    "group_times": "the events of a time read as one token: it scored lower where measured",
    "time_bias": "the attention bias over time gaps: no better where measured, and slower",
}
# The token's parts before they were one choice (``token``): their values in a lean token.
LEAN_PARTS = {"gap_buckets": False, "raw_values": False, "init": "fan_in"}


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
            ``query_time`` had (:class:`~seqenc.bundle.BundleMeta` sets it for them); not an
            option: a new model never has it (it leaks the window's end in training).
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
        event_dropout: in training, the share of each history's events the entity readout drops
            (:func:`~seqenc.model.batch.drop_events`): a regulariser for label heads trained on a
            few thousand rows.
        token: what an event's token is built from besides its item, features and values.
            ``"full"``: learned tables of the log-bucketed gaps (``dt_prev``, and the query gap
            with ``query_time``), the shared linear map of every value's signed log beside the
            per-item value MLP, and nanoGPT's N(0, 0.02) start
            (:func:`~seqenc.model.embeddings.init_weights`). ``"lean"`` (``configs/finetune.yaml``'s
            from scratch): time enters as its continuous values alone
            (``time_values``), a value is read in its item's units alone (with per-item values;
            without them the shared map is the only reader and stays), and PyTorch's own start
            (linear layers uniform within 1/sqrt(fan-in), tables N(0, 1)), under which the value
            and time MLPs are nonlinear in a standardised input from the first step (a bundle's
            weights replace the start).
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
    token: str = "full"

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
            (self.token in TOKENS, f"token={self.token!r} not in {TOKENS}"),
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
    def upgrade(saved: dict[str, Any], where: str = "") -> dict[str, Any]:
        """A saved configuration's fields with today's names: one written before the lengths were
        named (bundle format 1, older checkpoints) holds ``max_len``, the longest history, which is
        ``n_positions - 1``; one written before ``missing_values`` has no not-recorded vectors, one
        written before ``repeat_counts`` no purchase counts; one written before ``token`` holds its
        parts (:data:`LEAN_PARTS`); an option taken out (:data:`REMOVED`) is dropped when off and
        refused in one line when on (after ``where``, the file, when given)."""
        saved = {"missing_values": False, "repeat_counts": False} | saved
        at = f"{where}: " if where else ""
        for name, what in REMOVED.items():
            if saved.pop(name, None):
                raise SeqencError(
                    f"{at}the model was trained with encoder.{name} ({what}), which seqenc no "
                    "longer builds: train it again without it"
                )
        saved = _token(saved, at)
        if not isinstance(saved.get("max_len"), int):
            return saved
        rest = {k: v for k, v in saved.items() if k != "max_len"}
        return rest | {"n_positions": saved["max_len"] + 1}


def _token(saved: dict[str, Any], at: str) -> dict[str, Any]:
    """``saved`` with the token's parts of a configuration written before ``token`` read as the
    token they build: lean where each part the model reads is lean (the start, ``init``, is not
    read: the saved weights replace it); parts that disagree are refused in one line (after
    ``at``)."""
    parts = {k: saved.pop(k) for k in LEAN_PARTS if k in saved}
    parts.pop("init", None)
    if not parts or "token" in saved:
        return saved
    read = {
        "gap_buckets": saved.get("time", True),
        "raw_values": saved.get("numeric_scaling") != "global" and saved.get("n_numeric") != 0,
    }
    lean = {value == LEAN_PARTS[name] for name, value in parts.items() if read[name]}
    if len(lean) > 1:
        raise SeqencError(
            f"{at}the model was trained with encoder {parts}: a token seqenc no longer builds "
            "(encoder.token is full or lean); train it again"
        )
    return saved | {"token": "lean" if lean == {True} else "full"}
