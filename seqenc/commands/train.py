"""``seqenc fit|validate|test``: LightningCLI over :func:`~seqenc.commands.model.fit_model` (the
next-event or the fine-tuning module) and :class:`~seqenc.data.datamodule.SequenceDataModule`, with the run folder, checkpoints and bundle
set up, resume options checked, old option names answered in one line, and a curated ``--help``
(``--help-all`` for LightningCLI's full list)."""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable
from dataclasses import MISSING, fields
from difflib import get_close_matches
from functools import partial
from pathlib import Path

import yaml
from lightning.pytorch import Trainer
from lightning.pytorch.cli import LightningArgumentParser, LightningCLI, SaveConfigCallback

from seqenc.atomic import writable_directory
from seqenc.cli_support import (
    config_paths,
    held_output,
    one_line_errors,
    option_error,
)
from seqenc.commands.compat import align_after_fit, check_parent_bundle
from seqenc.commands.fit_checks import (
    LABEL_MONITOR,
    MONITOR,
    check_monitors,
    check_run_folder,
    run_directories,
)
from seqenc.commands.init_from import adopt_bundle
from seqenc.commands.model import fit_model
from seqenc.commands.trainer_defaults import MAX_EPOCHS, run_name, trainer_defaults
from seqenc.data.datamodule import SequenceDataModule
from seqenc.data.processes import check_processes
from seqenc.data.schema import EventSchema
from seqenc.devices import check_accelerator, trainer_options
from seqenc.errors import SeqencError
from seqenc.finetune.module import LabelModule
from seqenc.finetune.plan import set_label_schedule
from seqenc.model.config import LEAN_PARTS, REMOVED
from seqenc.model.encoder import EncoderConfig
from seqenc.signals import sigterm_raises
from seqenc.training.basket_plan import resolve_stopping, set_basket_schedule
from seqenc.training.callbacks import PATIENCE, ConfiguredEarlyStopping, WriteBundle
from seqenc.training.checkpoint import load_checkpoint
from seqenc.training.loss_choice import resume_loss
from seqenc.training.run_options import ENCODER_FIELDS, FROM_DATA, check_trainer, resume_options


class OneLineParser(LightningArgumentParser):
    """The parser of every option: a value it rejects (a wrong type, a value outside a Literal,
    an unknown option; on the command line or in a ``--config`` file) is one
    :class:`SeqencError` line naming the option, the value and what it takes
    (:func:`~seqenc.cli_support.option_error`), not jsonargparse's usage message."""

    def __init__(self, *args, argv: list[str] | None = None, **kwargs) -> None:
        self._argv = argv  # None: a parser jsonargparse nests (its message ends in the outer one)
        super().__init__(*args, **kwargs)

    def error(self, message: str, ex: Exception | None = None) -> None:
        if self._argv is None:
            super().error(message, ex)
        unknown = re.search(
            r"unrecognized arguments: --([\w.@-]+)|accept option '([^']+)'", message
        )
        name = unknown and f"--{unknown.group(1) or unknown.group(2)}"
        close = name and get_close_matches(name, self._options(), 1, 0.85)
        hint = f"; did you mean {close[0]}?" if close else ""
        raise SeqencError(option_error(message, self._argv) + hint) from ex

    def _options(self) -> list[str]:
        """Every option this parser and its subcommands' parsers take (``--model.lr``)."""
        subcommands = self._subcommands_action
        parsers = [self, *(subcommands.choices.values() if subcommands else [])]
        return [name for parser in parsers for name in parser._option_string_actions]


class SeqencCLI(LightningCLI):
    """Wires the data module's spec into the model, tests the best checkpoint right after ``fit``
    and prints where the checkpoint and the bundle are. Embeddings are made by ``seqenc embed``
    (one prediction path), so there is no ``predict`` subcommand."""

    @staticmethod
    def subcommands() -> dict[str, set[str]]:
        return {k: v for k, v in LightningCLI.subcommands().items() if k != "predict"}

    def add_arguments_to_parser(self, parser) -> None:
        # the model is handed what it reads of the data (never through the trainer)
        for source, target in (
            ("spec", "spec"),
            ("labelled", "labelled"),
            ("fit_splits", "splits"),
        ):
            parser.link_arguments(f"data.{source}", f"model.{target}", apply_on="instantiate")
        # Early stopping as its own config section, so a run can relax it: with a cosine schedule
        # the validation curve is noisy while the learning rate is high.
        parser.add_lightning_class_args(ConfiguredEarlyStopping, "early_stopping")
        parser.add_argument(  # seqenc.compat.lineage: after fit, map the new space to OLD's
            "--compatible_with", type=str | None, default=None, help="OLD bundle to stay usable for"
        )
        parser.set_defaults(
            {
                "early_stopping.monitor": MONITOR,
                "early_stopping.mode": "max",
                "early_stopping.patience": None,  # PATIENCE, or the fit's own (basket_plan)
            }
        )

    def __init__(self, *args, release: Callable[[], None] = lambda: None, **kwargs) -> None:
        self._release = release  # prints what was held back (cli_support.held_output)
        self._init_line = ""  # what a start from a bundle changed (before_instantiate_classes)
        self._resume_line = ""  # what a resumed fit's loss changes (_parse_ckpt_path)
        super().__init__(*args, **kwargs)

    def parse_arguments(self, parser, args) -> None:
        self._args = args  # kept to tell the options given from the defaults (_parse_ckpt_path)
        super().parse_arguments(parser, args)
        self.check_before_start()

    def _parse_ckpt_path(self) -> None:
        """With ``--ckpt_path``: the checkpoint's model options, except those given on the command
        line or in a config file (:func:`~seqenc.training.run_options.resume_options`: a changed learning rate or
        dropout applies, a changed ``d_model`` is refused, the loss goes on, a fit says what
        changes in it). Lightning's own lets the checkpoint's override every given one, silently."""
        subcommand = self.config.get("subcommand")
        path = subcommand and self.config[subcommand].get("ckpt_path")
        if not path:
            return
        checkpoint = load_checkpoint(path)  # one line for a truncated or foreign file
        # the data's state (its vocabularies), restored before the run's checks (check_run)
        self._saved_data = checkpoint.get(SequenceDataModule.__qualname__)
        saved = {k: v for k, v in checkpoint.get("hyper_parameters", {}).items() if k[0] != "_"}
        explicit = self.parser.parse_args(self._args, defaults=False, _skip_validation=True)
        given = explicit[subcommand].get("model")
        model = resume_options(given := given.as_dict() if given else {}, saved)
        self._resume_line = resume_loss(given, saved)[1] if subcommand == "fit" else ""
        self.config = self.parser.parse_object({subcommand: {"model": model}}, self.config)

    def before_instantiate_classes(self) -> None:
        """A bundle fine-tuned from (``model.init_from``) gives the run its vocabularies and
        encoder shape (:func:`~seqenc.commands.init_from.adopt_bundle`), so its weights fit."""
        config = self.config.get(self.config.get("subcommand"), self.config)
        if config.get("model") and config.model.get("init_from"):
            self._init_line = adopt_bundle(config)

    def check_run(self, stage: str) -> None:
        """Build what the run reads and check it against the trainer's processes
        (:func:`~seqenc.data.processes.check_processes`), then print what was held back: bad
        data fails in one line before Lightning's banner or anything else."""
        if getattr(self, "_saved_data", None):  # the checkpoint's vocabularies encode the log
            self.datamodule.load_state_dict(self._saved_data)
        check_processes(self.datamodule, self.trainer.world_size, stage)
        if stage == "fit":
            check_monitors(self.model, self.trainer)
            check_run_folder(self.model, self.datamodule, self.trainer)
        self._release()

    def before_validate(self) -> None:
        self.check_run("validate")

    def before_test(self) -> None:
        self.check_run("test")

    def before_fit(self) -> None:
        self.check_run("fit")
        if self.trainer.is_global_zero:
            print(self.datamodule.vocabs.describe())
        stopping = next(
            (c for c in self.trainer.callbacks if isinstance(c, ConfiguredEarlyStopping)), None
        )
        if isinstance(self.model, LabelModule):  # fine-tuning: the labelled score picks
            for callback in self.trainer.callbacks:
                if getattr(callback, "monitor", None) == MONITOR:
                    callback.monitor = LABEL_MONITOR
            steps = self.model.hparams.label_steps
            lines = [set_label_schedule(self.trainer, self.datamodule, steps)]
            lines += resolve_stopping(stopping, "the held-out labelled entities", picks=True)
        elif self.model.spec.baskets:  # the next basket: validation asks what the test asks
            steps = self.model.hparams.basket_steps
            lines = set_basket_schedule(self.trainer, self.datamodule, steps, stopping)
        else:
            lines = resolve_stopping(stopping, "the event before the newest", picks=False)
        lines = [line for line in (self._init_line, self._resume_line, *lines) if line]
        if lines and self.trainer.is_global_zero:
            print("\n".join(lines))

    def check_before_start(self) -> None:
        """What fails before anything is seeded or built (so before Lightning's banner): a seed
        out of range, an accelerator the machine lacks, a run directory that cannot be written,
        an unreadable parent bundle."""
        config = self.config.get(self.config.get("subcommand"), self.config)  # run=False: flat
        seed = config.get("seed_everything")
        if not isinstance(seed, bool) and isinstance(seed, int) and not 0 <= seed < 2**32:
            raise SeqencError(f"seed_everything must lie in [0, 2**32), got {seed}")
        trainer = config.trainer
        check_trainer(trainer)
        check_accelerator(trainer.accelerator, trainer.devices)
        for directory in run_directories(trainer):
            writable_directory(directory, "run directory")
        check_parent_bundle(config.get("compatible_with"))

    def instantiate_trainer(self, **kwargs) -> Trainer:
        with trainer_options():
            return super().instantiate_trainer(**kwargs)

    def after_fit(self) -> None:
        writer = next(c for c in self.trainer.callbacks if isinstance(c, WriteBundle))
        self.trainer.test(
            self.model, datamodule=self.datamodule, ckpt_path=writer.checkpoint or None
        )
        if self.trainer.is_global_zero:
            print(f"checkpoint: {writer.checkpoint or '(none saved)'}")
            print(f"bundle: {writer.path}")
            align_after_fit(self.config.fit.get("compatible_with"), writer.path, self.datamodule)


# Keys renamed when the lengths got their names, the model its encoder section and the item
# vocabulary its bounds.
RENAMED = {"data.max_len": "data.history_len", "data.min_count": "data.min_item_count"} | {
    f"model.{name}": f"model.encoder.{name}" for name in sorted(ENCODER_FIELDS - set(FROM_DATA))
}
# The token's parts (one choice now) and the options taken out, each at its two places (the
# encoder's options were once the model's).
RENAMED |= {
    f"model.{where}{name}": "model.encoder.token (lean: no gap tables, values read in their "
    "item's units alone, PyTorch's own start)"
    for name in LEAN_PARTS
    for where in ("", "encoder.")
}
TAKEN_OUT = {f"model.{where}{k}": why for k, why in REMOVED.items() for where in ("", "encoder.")}


def check_renamed(argv: list[str]) -> None:
    """An option under its old name (command line or ``--config`` file) is one line naming the
    new one, not jsonargparse's usage message."""
    keys = [a[2:].split("=", 1)[0] for a in argv if a.startswith("--")]
    for path in config_paths(argv):
        if Path(path).is_file():
            keys += _yaml_keys(yaml.safe_load(Path(path).read_text()), f"{path}: ")
    for key in keys:
        old = key.split(": ")[-1]
        if old in RENAMED:
            raise SeqencError(f"{key} is now {RENAMED[old]}")
        if old in TAKEN_OUT:
            raise SeqencError(f"{key} was taken out ({TAKEN_OUT[old]}): drop it")


def _yaml_keys(tree: object, prefix: str, path: str = "", depth: int = 3) -> list[str]:
    """``data.max_len``-style paths of the mapping ``tree`` below its top level, up to ``depth``
    levels (``model.encoder.time_bias``), each after ``prefix``."""
    if not isinstance(tree, dict) or depth == 0:
        return []
    keys = []
    for key, value in tree.items():
        here = f"{path}.{key}" if path else str(key)
        keys += [f"{prefix}{here}"] if path else []
        keys += _yaml_keys(value, prefix, here, depth - 1)
    return keys


def main(argv: list[str], given: list[str] | None) -> None:
    """``seqenc fit|validate|test ...`` (``argv`` from the subcommand on; ``given`` is what the
    caller passed, ``None`` for ``sys.argv``, which LightningCLI then reads itself)."""
    if any(a in ("-h", "--help") for a in argv):
        print(curated_help(argv[0]))
        return
    if "--help-all" in argv:
        argv = ["--help" if a == "--help-all" else a for a in argv]
        given = argv
    # SIGTERM stops every stage (fit, test, baselines, the bundle, the printing) with exit 143:
    # Lightning's own handler only notes it, and only its training loop looks.
    with one_line_errors(f"seqenc {argv[0]}"), held_output() as release, sigterm_raises():
        check_renamed(argv)
        SeqencCLI(
            fit_model,
            SequenceDataModule,
            trainer_defaults=trainer_defaults(run_name(argv)),
            # Only fit saves its config (into the run folder); test / validate have no run folder.
            save_config_callback=SaveConfigCallback if argv[:1] == ["fit"] else None,
            save_config_kwargs={"overwrite": True},
            args=given,  # None: LightningCLI reads sys.argv itself
            parser_class=partial(OneLineParser, argv=argv),
            release=release,
        )


# The options a user sets first: (option, what it sets); the defaults are read from the classes.
FIRST_OPTIONS = {
    "data": [
        ("path", "the event log: Parquet/CSV file(s), a glob or a directory"),
        ("format", "events (columns: data.schema), or movielens, sasrec, auto"),
        ("schema.entity", "entity column (account, user)"),
        ("schema.item", "item column (event kind, product)"),
        ("schema.timestamp", "time column (null: no times)"),
        ("schema.categorical", "categorical event columns, e.g. '[channel]'"),
        ("schema.numeric", "numeric event columns, e.g. '[amount]'"),
        ("history_len", "events per history fed to the model (the newest)"),
        ("max_items", "keep the most frequent items; the rest share hashed buckets"),
        ("baskets", "same-time events are a set (null: from the data's ties)"),
        ("batch_size", "training samples per batch"),
        ("labels", "label table (Parquet/CSV): fine-tune a label head"),
        ("label_column", "the label to predict (with data.labels)"),
        ("as_of_column", "per-label cut-off: only earlier events are read"),
    ],
    "model": [
        ("objective", "causal (next event) or masked (cloze)"),
        ("encoder.d_model", "embedding size"),
        ("encoder.n_layers", "Transformer blocks"),
        ("encoder.n_heads", "attention heads"),
        ("encoder.dropout", "dropout on embeddings and residual branches"),
        ("encoder.pooling", "entity embedding: last position, mean, attention or items"),
        ("encoder.repeat_head", "copy head for repeated items (null: from the data)"),
        ("lr", "AdamW learning rate (warm-up, then cosine decay)"),
        ("init_from", "a bundle whose encoder weights start the fit (fine-tuning)"),
        ("class_weights", "fine-tuning: auto (rare classes weigh more), none, or a list"),
        ("label_steps", "fine-tuning: optimizer steps (null: from the labelled rows)"),
        ("fusion", "fine-tuning: aggregates (beside the sequence in the head) or none"),
        ("warmup_steps", "linear warm-up steps"),
    ],
    "trainer": [
        ("max_epochs", "epochs"),
        ("accelerator", "cpu, gpu or auto"),
        ("devices", "how many, or which"),
    ],
    "early_stopping": [("patience", "validations without improvement before stopping")],
}
GENERAL = [
    ("--config FILE", "a YAML config (configs/*.yaml); several layer in order"),
    ("--seed_everything N", "seed of the initialisation and the batch order"),
    ("--ckpt_path CKPT", "start from a checkpoint (fit: resume)"),
    ("--print_config", "print the whole configuration of this run and exit"),
    ("--help-all", "every option (LightningCLI's list, hundreds of lines)"),
]


def _defaults() -> dict[str, object]:
    """The defaults of :data:`FIRST_OPTIONS`, read from the classes that take them."""
    found: dict[str, object] = {
        "trainer.max_epochs": MAX_EPOCHS,
        "trainer.accelerator": "auto",
        "trainer.devices": "auto",
        "early_stopping.patience": f"null: {PATIENCE}, a next-basket fit's own",
    }
    for section, cls in (("data", SequenceDataModule), ("model", fit_model)):
        for name, p in inspect.signature(cls).parameters.items():
            found[f"{section}.{name}"] = p.default
    for prefix, cls in (("data.schema", EventSchema), ("model.encoder", EncoderConfig)):
        for f in fields(cls):
            factory = f.default_factory
            found[f"{prefix}.{f.name}"] = f.default if factory is MISSING else factory()
    return found


def curated_help(subcommand: str) -> str:
    """The options a user sets first, with their defaults; ``--help-all`` lists every option."""
    defaults = _defaults()
    lines = [
        f"usage: seqenc {subcommand} [--config FILE ...] [--SECTION.OPTION VALUE ...]",
        "",
        "The options set first (the full list: --help-all). YAML configs use the same names:",
        "data.history_len is `data: {history_len: 64}`.",
        "",
    ]
    lines += [f"  {option:<30} {what}" for option, what in GENERAL]
    for section, options in FIRST_OPTIONS.items():
        lines.append("")
        for name, what in options:
            default = defaults.get(f"{section}.{name}", inspect.Parameter.empty)
            shown = "" if default is inspect.Parameter.empty else f" (default: {default})"
            lines.append(f"  {f'--{section}.{name}':<30} {what}{shown}")
    return "\n".join(lines)
