"""`python -m farm.cli ...` is `farm ...` (the tests run it this way)."""

import sys

from farm.cli.app import main

sys.exit(main())
