"""The package version, in a module of its own so that anything may import it without a cycle."""

__version__ = "0.1.0"
