"""The `zoflash` command line: `main(argv)` returns the exit code (testable without a subprocess)."""

import signal as _signal


def _ctrl_c_while_starting(signum, frame):
    # Ctrl-C while the command line's modules load (about a second) would print a traceback
    # from deep inside an import: end quietly with Ctrl-C's exit status instead; nothing has
    # started yet, so there is nothing to save.
    raise SystemExit(130)


_previous = _signal.getsignal(_signal.SIGINT)
if _previous is _signal.default_int_handler:  # not when the caller ignores or handles Ctrl-C itself
    _signal.signal(_signal.SIGINT, _ctrl_c_while_starting)
try:
    from zoflash.cli.main import cli, main
finally:
    if _previous is _signal.default_int_handler:
        _signal.signal(_signal.SIGINT, _previous)

__all__ = ["cli", "main"]
