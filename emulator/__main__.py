"""`python -m emulator ...` is `thc-switch ...`."""

import sys

from emulator.switch_cli import main

sys.exit(main())
