"""The one exception type seqenc raises for bad user input."""


class SeqencError(ValueError):
    """Bad input: the message names the column, file or value at fault."""


def ignored(option: str, value: object, why: str) -> SeqencError:
    """The one line of an option the run would not read: which, why, and to drop it."""
    return SeqencError(f"{option} would be ignored: {why}; drop it (got {value!r})")
