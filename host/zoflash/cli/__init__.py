"""The `zoflash` command line: `main(argv)` returns the exit code (testable without a subprocess)."""

import signal as _signal

import zoflash as _zoflash
from zoflash.cli.main import cli, main

# Loaded: Ctrl-C is Python's again (the commands save what exists and exit 130).
if _signal.getsignal(_signal.SIGINT) is _zoflash._ctrl_c_while_starting:
    _signal.signal(_signal.SIGINT, _signal.default_int_handler)

__all__ = ["cli", "main"]
