"""pmap-migrate's machinery: CLI, configuration, file discovery, engine and reports."""

__version__ = "0.1.0"
