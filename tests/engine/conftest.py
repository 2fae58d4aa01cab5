"""Make this folder's test oracles importable as ``reference_maxmin`` (tests run in importlib mode)."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
