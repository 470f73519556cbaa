"""`python -m emulator ...` is `thc-switch ...`."""

import sys

from emulator.cli import main

sys.exit(main())
