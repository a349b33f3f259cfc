"""zoflash: INT8 TFLite to bit-exact C, and zeroth-order on-device training for NPU microcontrollers."""

import os as _os
import signal as _signal
import sys as _sys

__version__ = "0.1.0"


def _ctrl_c_while_starting(signum, frame):
    # Ctrl-C while the command line's modules load (about a second) would print a traceback from
    # deep inside an import: end at once, quietly, with Ctrl-C's exit status. Nothing has started
    # and nothing is written yet, so nothing is lost (an exception raised here can surface as
    # another error inside the import machinery, hence no SystemExit). zoflash.cli puts Python's
    # handler back once it is loaded.
    _os._exit(130)


# Only as the `zoflash` command (console script or `python -m zoflash`), never when imported as a
# library, and not when the caller ignores or handles Ctrl-C itself.
if _os.path.basename(_sys.argv[0] if _sys.argv else "") in ("zoflash", "__main__.py") and (
    _signal.getsignal(_signal.SIGINT) is _signal.default_int_handler
):
    _signal.signal(_signal.SIGINT, _ctrl_c_while_starting)
