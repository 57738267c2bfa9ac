"""`python -m farm.cli ...` is `farm ...` (the tests run it this way)."""

import sys

from farm.cli import main

sys.exit(main())
