"""`python -m tinykit` is the `tinykit` command."""

from __future__ import annotations

import sys

from tinykit.cli import main

sys.exit(main())
