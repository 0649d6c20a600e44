"""The Typer command-line interface; each file registers one group of commands."""
