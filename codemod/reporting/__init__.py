"""Renderers of a run's results. Each returns text (or writes to a given stream); only the CLI prints."""

FORMATS = ("text", "json", "github", "sarif")
