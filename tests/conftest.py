"""Make tests/support importable as ``tests_support``."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent / "support"))
