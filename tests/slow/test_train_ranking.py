"""The learned ranking's committed weights are what bench/train_ranking.py fits, from the
tuning half alone (it embeds the three tuning dialogues with the bundled embedder)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_the_training_script_reproduces_the_committed_weights() -> None:
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    done = subprocess.run([sys.executable, str(ROOT / "bench" / "train_ranking.py"), "--check"],
                          capture_output=True, text=True, env=env, timeout=600, cwd=ROOT)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "committed weights reproduced" in done.stdout
