import sys

from zoflash.cli.main import main

sys.exit(main())
