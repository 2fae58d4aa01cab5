"""``python -m collsim`` runs the command line."""

from __future__ import annotations

import sys

from collsim.cli import main

sys.exit(main())
