"""Incremental encoding: the state file, merging new events into windows, the tie rule, the run over cached keys."""
