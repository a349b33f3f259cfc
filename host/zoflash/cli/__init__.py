"""The `zoflash` command line: `main(argv)` returns the exit code (testable without a subprocess)."""

from zoflash.cli.main import cli, main

__all__ = ["cli", "main"]
