"""The learned ranking of a hybrid search's fused candidates.

``features.py`` turns the pool into numbers; ``learned.py`` scores them with weights fitted
by bench/train_ranking.py on the tuning half of tests/data/conversations/ and committed
beside this file as data (``weights.json``).
"""

from __future__ import annotations

from pathlib import Path

WEIGHTS_PATH = Path(__file__).resolve().parent / "weights.json"
