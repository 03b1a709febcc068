"""`python -m finops.cli` runs the `finops` command."""

import sys

from finops.cli import main

sys.exit(main())
