"""A trained model as a self-contained directory that loads without pickle.

A bundle holds ``config.json`` (versions, model name, objective, the
:class:`~seqenc.model.encoder.EncoderConfig`, the data spec without vocabularies, a hash of that
configuration and the SHA-256 of the other files), ``vocab.json`` (:meth:`Vocabularies.to_dict`)
and ``model.safetensors`` (the encoder weights, and a fine-tuned model's label head under ``head.``). The format is plain data: this module
imports the model and the data spec, never training code, and loading reads JSON and safetensors
only, type-checking and cross-checking every field with messages naming the file and the field.
Bundles are written under a temporary name and renamed into place. Earlier formats still load.
"""

from __future__ import annotations

import hashlib
import json
import logging
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import Any, get_type_hints

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file

from seqenc.atomic import atomic_directory
from seqenc.data.schema import EventSchema
from seqenc.data.spec import DataSpec
from seqenc.data.vocab import MAX_VOCAB_BYTES, VOCAB_FILE, Vocabularies, vocab_id_types
from seqenc.errors import SeqencError
from seqenc.model.encoder import EncoderConfig, SequenceEncoder
from seqenc.model.head import SupervisedHead
from seqenc.model.objectives import OBJECTIVES
from seqenc.reading import read_bounded, regular_file
from seqenc.version import __version__

log = logging.getLogger(__name__)
FORMAT_VERSION = 2  # 2: the lengths named (history_len, encoder.n_positions)
READABLE_VERSIONS = (1, 2)
CONFIG_FILE, WEIGHTS_FILE = "config.json", "model.safetensors"
# The most a configuration (or lineage) file may hold: a few KB (vocabularies: MAX_VOCAB_BYTES).
MAX_CONFIG_BYTES = 1 << 20


@dataclass(frozen=True)
class BundleMeta:
    """What ``config.json`` holds.

    Attributes:
        name: a human-readable model name (written into every export).
        objective: ``"causal"`` or ``"masked"``.
        history_len: the newest ``history_len`` events of a history are fed to the model (at
            most ``encoder.n_positions - 1``: the [MASK] slot).
        encoder: the encoder architecture.
        schema: the event-log columns the model reads, with the id types it reads them with.
        config_hash: short SHA-256 of (objective, history_len, encoder, schema): bundles with equal
            hashes read the same inputs and give embeddings of the same shape.
        weights_sha256: SHA-256 of ``model.safetensors``, checked on load.
        vocab_sha256: SHA-256 of ``vocab.json``, checked on load (``""`` in bundles written before
            it existed: not checked).
        seqenc_version: the seqenc version that wrote the bundle.
        format_version: the bundle layout version.
        vocabulary: what the vocabulary bounds did at fit time (:meth:`Vocabularies.figures`:
            values kept, out-of-vocabulary buckets, share of training events in them), for people
            to read; encoding reads the buckets from ``vocab.json`` (``{}`` in older bundles).
        head: a fine-tuned model's label head (:meth:`SupervisedHead.describe
            <seqenc.model.head.SupervisedHead.describe>`: task, classes, scale), whose weights are
            the ``head.*`` tensors; ``{}`` for a self-supervised model (and in older bundles).
    """

    name: str
    objective: str
    history_len: int
    encoder: EncoderConfig
    schema: EventSchema
    config_hash: str
    weights_sha256: str
    vocab_sha256: str = ""
    seqenc_version: str = __version__
    format_version: int = FORMAT_VERSION
    vocabulary: dict[str, Any] = field(default_factory=dict)
    head: dict[str, Any] = field(default_factory=dict)

    @property
    def dim(self) -> int:
        """Embedding dimension."""
        return self.encoder.d_model

    def to_dict(self) -> dict[str, Any]:
        return {
            "format_version": self.format_version,
            "seqenc_version": self.seqenc_version,
            "name": self.name,
            "objective": self.objective,
            "history_len": self.history_len,
            "encoder": asdict(self.encoder),
            "schema": self.schema.to_dict(),
            "config_hash": self.config_hash,
            "weights_sha256": self.weights_sha256,
            "vocab_sha256": self.vocab_sha256,
            "vocabulary": self.vocabulary,
            "head": self.head,
        }

    @classmethod
    def from_dict(cls, d: Any, where: str) -> BundleMeta:
        """Validate a parsed ``config.json``; every problem names ``where`` and the field."""
        if not isinstance(d, dict):
            raise SeqencError(f"{where}: expected a JSON object, got {type(d).__name__}")
        version = d.get("format_version")
        if version not in READABLE_VERSIONS:
            raise SeqencError(
                f"{where}: bundle format version {version!r} is not supported; seqenc "
                f"{__version__} reads versions {READABLE_VERSIONS} (re-export the bundle, or use "
                f"the seqenc version that wrote it: {d.get('seqenc_version')!r})"
            )
        stored = d  # the config_hash covers the fields as written
        if version == 1:
            d = {k: v for k, v in d.items() if k != "max_len"}
            d |= {"history_len": stored["max_len"]} if "max_len" in stored else {}
        if isinstance(d.get("encoder"), dict):  # today's fields (old names, options taken out)
            d = d | {"encoder": EncoderConfig.upgrade(d["encoder"], where)}
        optional = {"vocab_sha256", "vocabulary", "head"}
        missing = [k for k in cls.__dataclass_fields__ if k not in d and k not in optional]
        if missing:
            raise SeqencError(f"{where}: missing key(s) {missing}")
        for key in ("name", "objective", "config_hash", "weights_sha256", "seqenc_version"):
            _expect(d[key], str, f"{where}: {key}")
        _expect(d.get("vocab_sha256", ""), str, f"{where}: vocab_sha256")
        for key in ("vocabulary", "head"):
            _expect(d.get(key, {}), dict, f"{where}: {key}")
        _expect(d["history_len"], int, f"{where}: history_len")
        for key in ("encoder", "schema"):
            _expect(d[key], dict, f"{where}: {key}")
        # Bundles written before the query time had the recency input instead.
        legacy = {"query_time": False, "recency": d["encoder"].get("time", True)}
        legacy = {} if "query_time" in d["encoder"] else legacy
        encoder = _dataclass_from(EncoderConfig, d["encoder"] | legacy, f"{where}: encoder")
        schema = _dataclass_from(EventSchema, d["schema"], f"{where}: schema")
        meta = cls(
            name=d["name"],
            objective=d["objective"],
            history_len=d["history_len"],
            encoder=encoder,
            schema=schema,
            config_hash=d["config_hash"],
            weights_sha256=d["weights_sha256"],
            vocab_sha256=d.get("vocab_sha256", ""),
            seqenc_version=d["seqenc_version"],
            format_version=version,
            vocabulary=d.get("vocabulary", {}),
            head=d.get("head", {}),
        )
        meta.check(where)
        if meta.config_hash != _hash({k: stored[k] for k in stored if k in HASHED}):
            raise SeqencError(f"{where}: config_hash does not match the configuration (edited?)")
        return meta

    def check(self, where: str) -> None:
        """The fields must agree with each other (a bundle is written and read through this)."""
        enc, schema = self.encoder, self.schema
        problems = [
            (
                self.objective in OBJECTIVES,
                f"objective must be one of {list(OBJECTIVES)}, got {self.objective!r}",
            ),
            (
                self.objective not in OBJECTIVES or OBJECTIVES[self.objective].causal == enc.causal,
                f"objective {self.objective!r} does not match encoder.causal={enc.causal}",
            ),
            (
                1 <= self.history_len < enc.n_positions,
                f"history_len {self.history_len} must lie in [1, encoder.n_positions - 1 = "
                f"{enc.n_positions - 1}]",
            ),
            (
                len(schema.categorical) == len(enc.categorical_sizes),
                f"schema.categorical has {len(schema.categorical)} column(s), "
                f"encoder.categorical_sizes {len(enc.categorical_sizes)}",
            ),
            (
                len(schema.numeric) == enc.n_numeric,
                f"schema.numeric has {len(schema.numeric)} column(s), encoder.n_numeric {enc.n_numeric}",
            ),
            (
                schema.timestamp is not None or not enc.time,
                "encoder.time is true but schema.timestamp is null",
            ),
        ]
        for ok, message in problems:
            if not ok:
                raise SeqencError(f"{where}: {message}")


def _expect(value: Any, kind: type, where: str) -> None:
    """``value`` must be a JSON value of ``kind`` (bool is not an int, an int is a float)."""
    ok = isinstance(value, kind) and not (kind in (int, float) and isinstance(value, bool))
    if kind is float:
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
    if not ok:
        raise SeqencError(f"{where} must be {kind.__name__}, got {value!r}")


def _dataclass_from(cls: type, d: dict[str, Any], where: str) -> Any:
    """``cls(**d)`` with each field's JSON type checked first, so errors name the field."""
    hints = get_type_hints(cls)
    unknown = sorted(set(d) - {f.name for f in fields(cls)})
    if unknown:
        raise SeqencError(f"{where}: unknown field(s) {unknown}")
    for name, value in d.items():
        hint = str(hints[name])
        if hint.startswith("dict") and isinstance(value, dict):
            for k, v in value.items():
                _expect(v, str, f"{where}.{name}[{k!r}]")
        elif hint.startswith("tuple") or "tuple" in hint:
            _expect(value, list, f"{where}.{name}")
            inner = str if "str" in hint else int
            for v in value:
                _expect(v, inner, f"{where}.{name}[]")
        elif value is None and "None" in hint:
            continue
        else:
            kind = next(k for k in (bool, int, float, str) if k.__name__ in hint)
            _expect(value, kind, f"{where}.{name}")
    try:
        return cls(**d)
    except (TypeError, ValueError) as e:
        raise SeqencError(f"{where}: invalid model configuration: {e}") from e


# The config.json keys the config_hash covers (format 1 bundles: max_len for history_len).
HASHED = ("objective", "history_len", "max_len", "encoder", "schema")


def config_hash(
    objective: str, history_len: int, encoder: EncoderConfig | dict, schema: EventSchema | dict
) -> str:
    """16 hex digits of the SHA-256 of the canonical JSON of the model's configuration (of the
    dicts as ``config.json`` stores them, so fields added later do not change old bundles' hash)."""
    encoder = encoder if isinstance(encoder, dict) else asdict(encoder)
    schema = schema if isinstance(schema, dict) else schema.to_dict()
    named = {"objective": objective, "history_len": history_len}
    return _hash(named | {"encoder": encoder, "schema": schema})


def _hash(fields: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(fields, sort_keys=True).encode()).hexdigest()[:16]


def finite_tensors(tensors: dict[str, torch.Tensor], where: str) -> dict[str, torch.Tensor]:
    """``tensors``, refused when one holds NaN or infinity: they would give NaN embeddings
    without a word (a diverged training, or a file edited and its checksum updated)."""
    bad = [k for k, t in tensors.items() if t.is_floating_point() and not t.isfinite().all()]
    if bad:
        raise SeqencError(
            f"{where}: {len(bad)} tensor(s) hold NaN or infinite values, e.g. {bad[0]!r} (saved "
            "from a diverged training?)"
        )
    return tensors


def file_sha256(path: Path) -> str:
    """SHA-256 of a regular file, hex (bundle files, the ONNX graph)."""
    regular_file(path)
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _check_vocabs(
    vocabs: Vocabularies, encoder: EncoderConfig, schema: EventSchema, where: str
) -> None:
    """The vocabularies must match the embedding tables they index."""
    sizes = tuple(len(vocabs.categorical[c]) for c in schema.categorical if c in vocabs.categorical)
    if len(vocabs.item) != encoder.n_items or sizes != encoder.categorical_sizes:
        raise SeqencError(
            f"{where}: vocabularies (items {len(vocabs.item)}, categorical {sizes}) do not match the "
            f"encoder (n_items {encoder.n_items}, categorical_sizes {encoder.categorical_sizes})"
        )


def bundle_inputs(path: str | Path) -> list[Path]:
    """The bundle's JSON and safetensors files (what a command reads, so never its output)."""
    return sorted(p for p in Path(path).glob("*") if p.suffix in (".json", ".safetensors"))


def _replaceable(target: Path) -> bool:
    """An existing bundle directory (or an empty one) may be replaced by a new bundle."""
    return (target / CONFIG_FILE).is_file() or not any(target.iterdir())


def save_bundle(
    output_dir: str | Path,
    encoder: SequenceEncoder,
    spec: DataSpec,
    objective: str | None = None,
    name: str | None = None,
    inputs: tuple[str | Path, ...] = (),
) -> Path:
    """Write ``encoder`` with its data spec as a bundle directory; returns its path. The one writer
    of bundles (``seqenc fit``, ``seqenc bundle``, Python). ``objective`` defaults to the encoder's
    (causal or not); ``name`` to the directory's name; ``inputs`` (a checkpoint read) stay."""
    output_dir = Path(output_dir)
    config = encoder.config
    objective = objective or ("causal" if config.causal else "masked")
    where = f"save_bundle({str(output_dir)!r})"
    _check_vocabs(spec.vocabs, config, spec.schema, where)
    config_text = {
        "objective": objective,
        "history_len": spec.history_len,
        "encoder": config,
        "schema": vocab_id_types(spec.schema, spec.vocabs, where),
    }
    state = {k: v.detach().cpu().contiguous() for k, v in encoder.state_dict().items()}
    with atomic_directory(output_dir, _replaceable, "a seqenc bundle", inputs) as tmp:
        save_file(state, tmp / WEIGHTS_FILE, metadata={"format": "pt"})
        (tmp / VOCAB_FILE).write_text(json.dumps(spec.vocabs.to_dict()) + "\n")
        meta = BundleMeta(
            name=name or output_dir.resolve().name,
            **config_text,
            config_hash=config_hash(**config_text),
            weights_sha256=file_sha256(tmp / WEIGHTS_FILE),
            vocab_sha256=file_sha256(tmp / VOCAB_FILE),
            vocabulary=spec.vocabs.figures(),
            head=encoder.head.describe() if encoder.head is not None else {},
        )
        meta.check(where)
        (tmp / CONFIG_FILE).write_text(json.dumps(meta.to_dict(), indent=2) + "\n")
    return output_dir


def read_json(path: Path, limit: int = MAX_CONFIG_BYTES) -> Any:
    """A bundle's JSON file, read with at most ``limit`` bytes (:func:`read_bounded`)."""
    data = read_bounded(path, limit)
    try:
        return json.loads(data)
    except (ValueError, RecursionError) as e:
        raise SeqencError(f"cannot read bundle file {str(path)!r}: {e}") from e


def read_meta(path: str | Path) -> BundleMeta:
    """A bundle's ``config.json`` alone (no weights read: what a run reads before it builds)."""
    path = Path(path)
    if not path.is_dir():
        raise SeqencError(f"model bundle not found: {str(path)!r} is not a directory")
    return BundleMeta.from_dict(read_json(path / CONFIG_FILE), str(path / CONFIG_FILE))


def load_bundle(path: str | Path) -> tuple[SequenceEncoder, BundleMeta, Vocabularies]:
    """Read a bundle: ``(encoder in eval mode on CPU, meta, vocabularies)``.

    Raises:
        SeqencError: naming the file, for a missing directory or file, malformed JSON, an
            unsupported format version, a field of the wrong type or inconsistent with another, a
            file whose checksum or tensors do not match.
    """
    path = Path(path)
    meta = read_meta(path)
    vocab_path = path / VOCAB_FILE
    vocab_json = read_json(vocab_path, MAX_VOCAB_BYTES)
    try:
        vocabs = Vocabularies.from_dict(vocab_json)
    except SeqencError as e:
        raise SeqencError(f"invalid bundle file {str(vocab_path)!r}: {e}") from e
    if not meta.vocab_sha256:
        log.warning("%s predates vocabulary checksums: vocab.json is not verified", path)
    elif file_sha256(vocab_path) != meta.vocab_sha256:
        raise SeqencError(f"{str(vocab_path)!r} is corrupt: its SHA-256 differs from config.json's")
    _check_vocabs(vocabs, meta.encoder, meta.schema, str(vocab_path))
    meta = replace(meta, schema=vocab_id_types(meta.schema, vocabs, str(vocab_path)))

    weights = path / WEIGHTS_FILE
    if file_sha256(weights) != meta.weights_sha256:
        raise SeqencError(f"{str(weights)!r} is corrupt: its SHA-256 differs from config.json's")
    try:
        state = load_file(weights)
    except (SafetensorError, OSError, ValueError) as e:
        raise SeqencError(f"cannot read weights {str(weights)!r}: {e}") from e
    finite_tensors(state, repr(str(weights)))
    encoder = SequenceEncoder(meta.encoder)
    encoder.head = _head(meta, str(path / CONFIG_FILE))
    try:
        encoder.load_state_dict(state)
    except RuntimeError as e:
        raise SeqencError(
            f"weights {str(weights)!r} do not fit the encoder in config.json: {e}"
        ) from e
    return encoder.eval(), meta, vocabs


def _head(meta: BundleMeta, where: str) -> SupervisedHead | None:
    """The label head ``config.json`` describes (``None`` for a self-supervised model)."""
    if not meta.head:
        return None
    try:
        return SupervisedHead(meta.encoder.d_model, **meta.head)
    except (TypeError, ValueError) as e:
        raise SeqencError(f"{where}: invalid head: {e}") from e
