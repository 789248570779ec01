"""The one exception type seqenc raises for bad user input."""


class SeqencError(ValueError):
    """Bad input: the message names the column, file or value at fault."""
