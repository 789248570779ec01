"""The subcommands of ``seqenc``, one module each: ``add_arguments(parser)`` and ``run(args)``
(``train`` wraps LightningCLI instead). :mod:`seqenc.cli` is the one front that names them,
builds their parsers and turns user errors into one line."""
