"""`memoryd store reindex`: the graphs rebuilt from the store alone, with a summary."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from memoryd.privatefs import make_dirs
from tests.ann._store import make_store


def test_reindex_rebuilds_the_graphs_from_the_store_and_replaces_a_damaged_set(tmp_path: Path) -> None:
    data = tmp_path / "data"
    make_dirs(data)
    engine, seqs, _ = make_store(data / "memoryd.db", {"agent:a1": 1200, "agent:a2": 300})
    engine.dispose()
    config = tmp_path / "c.toml"
    config.write_text("vector_index_min_rows = 1000\nvector_index_part_rows = 500\n")
    junk = data / "index" / "vectors"
    make_dirs(junk)
    (junk / "manifest.json").write_text("{not json")
    (junk / "owner-1.7.hnsw").write_bytes(b"\0" * 100)
    cmd = [sys.executable, "-m", "memoryd", "store", "reindex", "--data-dir", str(data),
           "--config", str(config), "--json"]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)
    assert (summary["graphs"], summary["vectors_in_graphs"], summary["vectors"]) == (1, 1200, 1500)
    assert summary["parts"] == 3  # a1's 1,200 rows in graphs of 500, 500 and 200
    manifest = json.loads((junk / "manifest.json").read_text())
    assert [[p["count"] for p in e["parts"]] for e in manifest["owners"].values()] == [[500, 500, 200]]
    assert len(seqs["agent:a1"]) == 1200
    assert not (junk / "owner-1.7.hnsw").exists()
    assert (junk.stat().st_mode & 0o777) == 0o700
