"""The thin layer that meets users: the typer CLI (and, later, the in-cluster controller)."""
