"""`python -m zoflash ...`: the same command line as the `zoflash` script."""

import sys

from zoflash.cli import main

sys.exit(main())
