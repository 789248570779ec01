"""The options of a training run beyond the data: the encoder's configuration resolved from the
data, the options that would be ignored refused, and which options a resumed run may change."""

from __future__ import annotations

import math
from dataclasses import asdict, fields, replace
from typing import Any

from seqenc.data.bounds import check_count
from seqenc.data.spec import DataSpec
from seqenc.errors import SeqencError, ignored
from seqenc.model.batch import N_SPECIAL
from seqenc.model.encoder import EncoderConfig
from seqenc.model.losses import LOSSES, MATMUL_DTYPES, RUN_OWN_OPTIONS, loss_options
from seqenc.model.objectives import Causal, Masked
from seqenc.model.sampled import ITEM_GRADIENTS, SAMPLERS
from seqenc.training.basket_plan import check_basket_options
from seqenc.training.loss_choice import loss_defaults, resume_loss

REPEAT_SHARE = 0.05  # logs where at least this share of events repeat an item count as repeat logs
# Options that set which weights the model has and their shapes, or (n_heads) how they are read:
# a resumed run keeps them.
SHAPE_OPTIONS = (
    "d_model",
    "n_layers",
    "n_heads",
    "ffn_mult",
    "positional",
    "time",
    "query_time",
    "repeat_head",
    "repeat_counts",
    "n_time_buckets",
    "numeric_scaling",
    "missing_values",
    "token",
    "pooling",
    "time_values",
    "item_values",
    "objective",  # the module's: the entity model (masked) reads time values
    "fusion",  # the module's: a fused label head has the aggregates' weights
    "value_weight",  # the module's: the masked values' head
)
ENCODER_FIELDS = frozenset(f.name for f in fields(EncoderConfig))


# The encoder fields the data and the objective decide (SeqencModule sets them), and the one only
# a bundle written before the query time holds (the bundle loader sets it).
FROM_DATA = {
    "n_items": "the data's item vocabulary",
    "n_positions": "data.history_len + 1",
    "categorical_sizes": "the data's categorical vocabularies",
    "n_numeric": "data.schema.numeric",
    "causal": "model.objective",
    "baskets": "data.baskets (with the causal objective)",
    "recency": "bundles written before query_time, never a new model (it leaks the window's end)",
}


def resume_options(given: dict[str, Any], saved: dict[str, Any]) -> dict[str, Any]:
    """The model options of a run resumed from a checkpoint trained with ``saved``: the ones
    ``given`` (command line or config file) win, except that a shape option
    (:data:`SHAPE_OPTIONS`) cannot change its weights. The encoder's fields the data decides
    (:data:`FROM_DATA`) are left to the data: the built model is checked against the weights
    (:meth:`SeqencModule.on_load_checkpoint`). The catalogue term goes on as the checkpoint trained
    it (:func:`~seqenc.training.loss_choice.resume_loss`). A checkpoint of an older version holds
    the encoder's options beside the others (no ``encoder`` section), ``None`` for the automatic
    ones."""
    flat = {k: v for k, v in saved.items() if k in ENCODER_FIELDS}
    saved = {k: v for k, v in saved.items() if k not in ENCODER_FIELDS}
    saved_encoder = {
        k: v
        for k, v in EncoderConfig.upgrade(saved.get("encoder") or flat).items()
        if v is not None and k not in FROM_DATA
    }
    new_encoder = given.get("encoder") or {}
    for name in SHAPE_OPTIONS:
        where = "model.encoder" if name in ENCODER_FIELDS else "model"
        new, old = (
            (new_encoder.get(name), saved_encoder.get(name))
            if name in ENCODER_FIELDS
            else (given.get(name), saved.get(name))
        )
        if new is not None and old is not None and new != old:
            raise SeqencError(
                f"--{where}.{name} {new} cannot change when resuming: the checkpoint was "
                f"trained with {old} (it sets the weights' shapes); drop the option, or train a "
                "new model"
            )
    return saved | given | {"encoder": saved_encoder | new_encoder} | resume_loss(given, saved)[0]


def shape_mismatch(saved: dict[str, Any], config: EncoderConfig, spec: DataSpec) -> str:
    """Why weights of the encoder configuration ``saved`` do not fit ``config``: the data's
    vocabulary (which column, both sizes), ``history_len`` or a model option, each with both
    values."""
    schema = spec.schema
    saved, now = EncoderConfig.upgrade(saved), asdict(config)
    if saved["n_items"] != now["n_items"]:
        return (
            f"the data's vocabulary differs from the checkpoint's: column {schema.item!r} has "
            f"{now['n_items']} item ids here, {saved['n_items']} in the checkpoint (special ids "
            "included)"
        )
    old_sizes, new_sizes = tuple(saved["categorical_sizes"]), tuple(now["categorical_sizes"])
    if len(old_sizes) == len(new_sizes) and old_sizes != new_sizes:
        i = next(i for i, (a, b) in enumerate(zip(old_sizes, new_sizes, strict=True)) if a != b)
        return (
            f"the data's vocabulary differs from the checkpoint's: column "
            f"{schema.categorical[i]!r} has {new_sizes[i]} values here, {old_sizes[i]} in the "
            "checkpoint"
        )
    if old_sizes != new_sizes or saved["n_numeric"] != now["n_numeric"]:
        return (
            f"the data's schema differs from the checkpoint's: {len(new_sizes)} categorical and "
            f"{now['n_numeric']} numeric columns here, {len(old_sizes)} and {saved['n_numeric']} "
            "in the checkpoint"
        )
    changed = [
        f"model.encoder.{k} is {now[k]} here, {saved.get(k)}"
        for k in SHAPE_OPTIONS
        if k in now and saved.get(k) != now[k]
    ]
    if saved.get("n_positions") != now["n_positions"]:
        changed.append(
            f"data.history_len is {now['n_positions'] - 1} here, {saved['n_positions'] - 1}"
        )
    return "; ".join(f"{c} in the checkpoint" for c in changed) or (
        "its weights have other names or shapes"
    )


def resolve_encoder(
    encoder: EncoderConfig | dict[str, Any], spec: DataSpec, objective: Causal | Masked
) -> EncoderConfig:
    """``encoder`` with the fields the data decides set from ``spec`` and the objective
    (:data:`FROM_DATA`; one set otherwise is refused, in one line, rather than ignored), and its
    automatic options resolved: ``time`` (with ``query_time``) only when the log
    has timestamps (a config meant for timed logs then trains on a click log without), and
    ``repeat_head`` ``None`` on for the causal objective when at least ``REPEAT_SHARE`` of the
    events repeat an item of their entity, and ``numeric_scaling`` ``None`` per item (and
    ``missing_values`` on) when the log has numeric features; ``time_values`` and ``item_values``
    ``None`` on for a model without causal attention (the entity model of a label head), the
    latter with values read per item; ``repeat_counts`` ``None`` on with the repeat head (what
    P-TopFreq reads: baskets under the basket protocol, events otherwise). ``encoder`` may be a
    saved configuration's fields (a checkpoint's hyper-parameters)."""
    if isinstance(encoder, dict):
        encoder = EncoderConfig(**EncoderConfig.upgrade(encoder))
    data = {
        "n_items": spec.n_items,
        "n_positions": spec.history_len + 1,
        "categorical_sizes": spec.categorical_sizes,
        "n_numeric": spec.n_numeric,
        "causal": objective.causal,
        "baskets": spec.baskets and objective.causal,
        "recency": False,
    }
    for name, value in data.items():
        given = getattr(encoder, name)
        if given not in (value, getattr(EncoderConfig, name)):
            raise SeqencError(
                f"model.encoder.{name} is set from {FROM_DATA[name]} ({value} here), got "
                f"{given}: drop it"
            )
    use_time = spec.has_time and encoder.time
    repeat_head = encoder.repeat_head
    if repeat_head is None:
        repeat_head = spec.repeat_share >= REPEAT_SHARE and objective.causal
    numeric_scaling = encoder.numeric_scaling
    if numeric_scaling == "per_item" and not spec.n_numeric:
        why = "the log has no numeric columns (data.schema.numeric)"
        raise ignored("model.encoder.numeric_scaling", numeric_scaling, why)
    if numeric_scaling is None:
        numeric_scaling = "per_item" if spec.n_numeric else "global"
    if encoder.missing_values and not spec.n_numeric:
        why = "the log has no numeric columns (data.schema.numeric)"
        raise ignored("model.encoder.missing_values", True, why)
    entity = _entity_options(encoder, not objective.causal, numeric_scaling, spec.n_numeric)
    return replace(
        encoder,
        **data,
        numeric_scaling=numeric_scaling,
        missing_values=_auto(encoder.missing_values, spec.n_numeric > 0),
        item_values=entity["item_values"],
        time_values=use_time and entity["time_values"],
        time=use_time,
        query_time=use_time and encoder.query_time,
        repeat_head=repeat_head,
        repeat_counts=_auto(encoder.repeat_counts, repeat_head),
    )


def _auto(option: bool | None, default: bool) -> bool:
    """A switch whose ``None`` (auto) takes ``default``."""
    return default if option is None else option


def _entity_options(
    encoder: EncoderConfig, whole: bool, numeric_scaling: str, n_numeric: int
) -> dict[str, bool]:
    """The entity model's options resolved: ``time_values`` and ``item_values`` ``None`` on for a
    model whose events see each other (``whole``: no causal mask), the latter with values read
    per item."""
    item_values = encoder.item_values
    if item_values is None:
        item_values = whole and numeric_scaling == "per_item"
    if item_values and numeric_scaling != "per_item":
        raise SeqencError(
            "model.encoder.item_values reads values per item: it needs numeric columns and "
            f"numeric_scaling per_item (here {numeric_scaling}, {n_numeric} numeric columns)"
        )
    time_values = whole if encoder.time_values is None else encoder.time_values
    return {"item_values": item_values, "time_values": time_values}


def check_loss_options(loss: str, given: object, n_real_items: int) -> None:
    """Refuse, in one line, ``model.loss_options`` the loss does not take or cannot use: a count
    is a whole number from 1, negatives at most the catalogue's items (the other items for the
    binary losses), ``sampler`` one of :data:`~seqenc.model.sampled.SAMPLERS`, gbce's ``t`` and
    ``exact_share`` numbers in [0, 1], ``own_items`` true or false, ``item_gradient`` one of
    :data:`~seqenc.model.sampled.ITEM_GRADIENTS` and ``exact_rows`` only with exact rows
    (``generator``, ``proposal`` and ``groups`` are the run's own)."""
    if loss not in LOSSES:
        raise SeqencError(f"model.loss must be auto or one of {sorted(LOSSES)}, got {loss!r}")
    if given is None:
        return
    if not isinstance(given, dict):
        raise SeqencError(f"model.loss_options must be a mapping, got {given!r}")
    taken = set(loss_options(loss)) - RUN_OWN_OPTIONS
    unknown = sorted(set(given) - taken)
    if unknown:
        raise SeqencError(
            f"model.loss_options {unknown} are not options of loss {loss!r}; it takes "
            f"{sorted(taken)}"
        )
    most = {"n_negatives": n_real_items - (loss != "sampled_softmax"), "chunk_size": None}
    defaults = loss_defaults(loss)  # a checkpoint records them: the loss copes with its own
    for name, value in given.items():
        where = f"model.loss_options.{name}"
        if name in most:
            check_count(value, where)
            if most[name] is not None and value > most[name] and value != defaults.get(name):
                raise SeqencError(
                    f"{where} is {value}, more than the {most[name]:,} items it can draw from "
                    f"(the data's catalogue: {n_real_items:,} items)"
                )
        elif name == "sampler" and value not in SAMPLERS:
            raise SeqencError(f"{where} must be one of {SAMPLERS}, got {value!r}")
        elif name == "exact_share" and not (value is None or (_real(value) and 0 <= value <= 1)):
            raise SeqencError(f"{where} must be a number in [0, 1] (or null: auto), got {value!r}")
        elif name == "own_items" and not isinstance(value, bool):
            raise SeqencError(f"{where} must be true or false, got {value!r}")
        elif name == "item_gradient" and value not in ITEM_GRADIENTS:
            raise SeqencError(f"{where} must be one of {ITEM_GRADIENTS}, got {value!r}")
        elif name == "t" and not (_real(value) and 0 <= value <= 1):
            raise SeqencError(f"{where} must be a number in [0, 1], got {value!r}")
        elif name == "matmul_dtype" and value is not None and value not in MATMUL_DTYPES:
            raise SeqencError(f"{where} must be one of {sorted(MATMUL_DTYPES)}, got {value!r}")
    if given.get("item_gradient") == "exact_rows" and given.get("exact_share") == 0:
        raise SeqencError(
            "model.loss_options.item_gradient exact_rows trains the item table from the exact "
            "rows: exact_share 0 leaves none (set it above 0, or unset: auto)"
        )


def _real(value: object) -> bool:
    """A real number (not a bool, not text)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def check_options(
    options: dict[str, Any], encoder: EncoderConfig, defaults: dict[str, Any]
) -> None:
    """Refuse, in one line, an option that would be ignored (set to other than its default,
    ``defaults``, :func:`check_ignored`) or that cannot train (called when the model is built:
    before Lightning prints anything)."""
    prob, last = options["mask_prob"], options["mask_last_prob"]
    if not (_real(prob) and 0 < prob <= 1 and _real(last) and 0 <= last <= 1):
        raise SeqencError(
            f"model.mask_prob must be a number in (0, 1] and model.mask_last_prob in [0, 1], got "
            f"{prob!r} and {last!r}"
        )
    if encoder.repeat_head and options["loss"] not in ("ce", "sampled_softmax"):
        raise SeqencError(
            f"the repeat head's mixture needs a normalised catalogue term (model.loss: ce or "
            f"sampled_softmax), got {options['loss']!r}; or set model.encoder.repeat_head false"
        )
    if encoder.repeat_head and options["loss"] == "ce" and options["loss_options"]:
        why = (
            "the repeat head's mixture computes its exact catalogue term itself (or set "
            "model.loss sampled_softmax)"
        )
        raise ignored("model.loss_options", options["loss_options"], why)
    check_basket_options(options, encoder)
    check_loss_options(options["loss"], options["loss_options"], encoder.n_items - N_SPECIAL)
    check_optimiser(options["lr"], options["weight_decay"], options["warmup_steps"])
    for k in options["ks"]:
        check_count(k, "model.ks (each a cut-off >= 1)")
    weights = options["next_item_weight"], options["contrastive_weight"], options["value_weight"]
    if not all(_real(w) for w in weights) or min(weights) < 0 or max(weights) <= 0:
        raise SeqencError(
            "model.next_item_weight, contrastive_weight and value_weight must be numbers >= 0, "
            f"not all 0, got {weights[0]}, {weights[1]} and {weights[2]}"
        )
    temperature, share = options["contrastive_temperature"], options["contrastive_min_share"]
    if weights[1] > 0 and not (temperature > 0 and 0 < share <= 1):
        raise SeqencError(
            f"contrastive_temperature={temperature} must be > 0 and "
            f"contrastive_min_share={share} in (0, 1]"
        )
    check_ignored(options, defaults)


def check_optimiser(lr: object, weight_decay: object, warmup_steps: object) -> None:
    """One line unless ``lr`` and ``weight_decay`` are finite numbers >= 0 and ``warmup_steps``
    a whole number >= 0 (every module's AdamW and its schedule)."""
    if not (_real(lr) and lr >= 0 and _real(weight_decay) and weight_decay >= 0):
        raise SeqencError(
            "model.lr and model.weight_decay must be finite numbers >= 0, got "
            f"{lr!r} and {weight_decay!r}"
        )
    check_count(warmup_steps, "model.warmup_steps", low=0)


def check_ignored(options: dict[str, Any], defaults: dict[str, Any]) -> None:
    """Refuse, in one line, a model option set (to other than its default, ``defaults``) that
    the run would not read: cloze masking with the causal objective (and no masked values), the
    contrastive loss's shape without the loss."""
    masked = "and model.objective is causal"
    contrastive = "and model.contrastive_weight is 0"
    masks = options["objective"] == "masked" or options["value_weight"] > 0
    read = {
        "mask_prob": (masks, f"it sets the cloze masking, {masked} and model.value_weight 0"),
        "replace_rule": (options["objective"] == "masked", f"it sets the cloze masking, {masked}"),
        "mask_last_prob": (options["objective"] == "masked", f"it sets the cloze masking, {masked}"),
        "contrastive_temperature": (options["contrastive_weight"] > 0, f"it sets the contrastive loss, {contrastive}"),
        "contrastive_min_share": (options["contrastive_weight"] > 0, f"it sets the contrastive loss, {contrastive}"),
    }  # fmt: skip
    for name, (is_read, why) in read.items():
        if not is_read and options[name] != defaults[name]:
            raise ignored(f"model.{name}", options[name], why)


def check_trainer(trainer: Any) -> None:
    """Refuse, in one line before the trainer is built, the trainer options Lightning would take
    and fail on later (a division by zero at the first step, a clip it cannot apply)."""
    check_count(trainer.get("accumulate_grad_batches"), "trainer.accumulate_grad_batches")
    for name in ("check_val_every_n_epoch", "log_every_n_steps"):
        check_count(trainer.get(name), f"trainer.{name}", optional=True)
    interval = trainer.get("val_check_interval")
    if interval is not None and not (_real(interval) and interval > 0):
        raise SeqencError(f"trainer.val_check_interval must be > 0 or null, got {interval!r}")
    clip, algorithm = trainer.get("gradient_clip_val"), trainer.get("gradient_clip_algorithm")
    if clip is not None and not (_real(clip) and clip >= 0):
        raise SeqencError(f"trainer.gradient_clip_val must be a number >= 0 or null, got {clip!r}")
    if algorithm not in (None, "norm"):
        raise SeqencError(
            f"trainer.gradient_clip_algorithm must be norm or null (the clip counts the item "
            f"table's sparse gradient), got {algorithm!r}"
        )
