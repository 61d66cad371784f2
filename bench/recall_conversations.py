"""Recall of memory.search on the conversational set (tests/data/conversations/).

``bench/recall.py --set conversations`` runs this. Every turn of the six
dialogues is written to a real daemon (the bundled embedder) as a
``conversation`` memory: content ``"Speaker: text"``, scope ``project`` with one
project per dialogue (each dialogue is its own haystack, as an agent's memory
of one person or team is), ``session_id`` the dialogue's session, and
``occurred_at`` the turn's timestamp (protocol 1.1). After the embed queue has
drained, every question is asked in each mode (hybrid, lexical, vector) with
the dialogue's project as the reader's key, k=10, and scored against its
evidence turns, separately for the tuning half and the held-out half.

Figures, per half, per mode, per question type and overall:

- hit@k: 1 if at least one evidence turn is in the top k, else 0 (the
  "finds an evidence turn in its top 10" of issue 14's published figures);
- recall@k: the fraction of the question's evidence turns in the top k
  (a multi-hop question with three evidence turns and two found scores 2/3);
- MRR@10: 1 / rank of the first evidence turn in the top 10, 0 if none;
- session hit@10: 1 if a top-10 turn belongs to a session that holds an
  evidence turn (the figure issue 23 calls "session recall@10", 0.939 held-out);
- session recall@10: the share of the question's evidence sessions that a top-10
  turn belongs to (peers' session-level recall: a question whose evidence spans two
  sessions and whose top 10 reaches one scores 1/2);
- ms per query, per mode: each search's round trip over the socket (median, p95);
- for ``changed`` questions, stale-first@10: the share whose top 10 ranks a
  superseded statement (``stale_evidence``) above every current one.

A question's ``as_of`` date is not sent as ``as_of``: the daemon's ``as_of``
filters on ``recorded_at`` (when memoryd learned a row; every turn here is
recorded at load time), so it would hide the whole haystack. It is sent as
``time_ref``, the time the query's own time expressions ("in May", "last
week") are read against; a question without ``as_of`` is asked the day after
its dialogue's last session (the README's rule for undated questions).
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import time
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

import _harness as h

DATA = Path(__file__).resolve().parent.parent / "tests" / "data" / "conversations"
MODES = ("hybrid", "lexical", "vector")
TYPES = ("single", "multi", "temporal", "inference", "changed")
HALVES = ("tuning", "held-out")
K = 10
BATCH = 500  # memory.write_many takes up to 1,000 items


def load_set(quick: bool) -> list[dict[str, Any]]:
    """The dialogues, in id order; ``quick`` keeps one dialogue of each half."""
    dialogues = [json.loads(p.read_text()) for p in sorted(DATA.glob("d*.json"))]
    if quick:
        dialogues = [next(d for d in dialogues if d["split"] == half) for half in HALVES]
    return dialogues


def project_of(dialogue: dict[str, Any]) -> str:
    return f"conversations-{dialogue['id']}"


def turn_items(dialogue: dict[str, Any]) -> Iterable[tuple[str, dict[str, Any]]]:
    """(turn id, memory.write params) for every turn of the dialogue."""
    for session in dialogue["sessions"]:
        for turn in session["turns"]:
            yield turn["id"], {
                "content": f"{turn['speaker']}: {turn['text']}", "kind": "conversation",
                "scope": "project", "project": project_of(dialogue), "session_id": session["id"],
                "occurred_at": turn["timestamp"],
                "metadata": {"dialogue": dialogue["id"], "turn": turn["id"], "speaker": turn["speaker"]},
            }


def load(daemon: h.Daemon, dialogues: Sequence[dict[str, Any]]) -> dict[str, str]:
    """Write every turn; return daemon id -> turn id."""
    to_turn: dict[str, str] = {}
    pending = [pair for d in dialogues for pair in turn_items(d)]
    for start in range(0, len(pending), BATCH):
        chunk = pending[start:start + BATCH]
        out = daemon.call("memory.write_many", {"items": [params for _, params in chunk]})["results"]
        for (turn_id, _), result in zip(chunk, out, strict=True):
            if "duplicate_of" in result:
                # The set has no two equal turns in one dialogue (tests/unit/test_conversation_set.py).
                raise SystemExit(f"{turn_id} was answered as a duplicate of {result['duplicate_of']}")
            to_turn[result["id"]] = turn_id
    return to_turn


def neighbour_ids(dialogues: Sequence[dict[str, Any]], to_turn: dict[str, str]) -> dict[str, list[str]]:
    """daemon id -> the daemon ids of the turns just before and after it in its session."""
    to_id = {turn: mid for mid, turn in to_turn.items()}
    out: dict[str, list[str]] = {}
    for d in dialogues:
        for session in d["sessions"]:
            ids = [to_id[t["id"]] for t in session["turns"]]
            for i, mid in enumerate(ids):
                out[mid] = [ids[j] for j in (i - 1, i + 1) if 0 <= j < len(ids)]
    return out


def time_ref(q: dict[str, Any], dialogue: dict[str, Any]) -> str:
    """When the question is asked: its ``as_of`` date, else the day after the last session (UTC midnight)."""
    from datetime import date, timedelta

    day = q["as_of"] or (date.fromisoformat(dialogue["sessions"][-1]["date"]) + timedelta(days=1)).isoformat()
    return f"{day}T00:00:00Z"


def score(ranked: Sequence[str], q: dict[str, Any], session_of: dict[str, str]) -> dict[str, float]:
    """The figures of one question, from its ranked turn ids (best first)."""
    gold = set(q["evidence"])
    top5, top10 = set(ranked[:5]), set(ranked[:K])
    first = next((i for i, t in enumerate(ranked[:K], start=1) if t in gold), None)
    gold_sessions = {session_of[t] for t in gold}
    out = {
        "hit@5": float(bool(gold & top5)), "hit@10": float(bool(gold & top10)),
        "recall@5": len(gold & top5) / len(gold), "recall@10": len(gold & top10) / len(gold),
        "mrr@10": 1.0 / first if first else 0.0,
        "session_hit@10": float(any(session_of[t] in gold_sessions for t in ranked[:K])),
        "session_recall@10": len(gold_sessions & {session_of[t] for t in ranked[:K]}) / len(gold_sessions),
    }
    if q["type"] == "changed":
        stale = set(q["stale_evidence"])
        first_stale = next((i for i, t in enumerate(ranked[:K], start=1) if t in stale), None)
        out["stale_first@10"] = float(first_stale is not None and (first is None or first_stale < first))
    return out


FIGURES = ("hit@5", "hit@10", "recall@5", "recall@10", "mrr@10", "session_hit@10", "session_recall@10")


def mean(rows: Sequence[dict[str, float]], key: str) -> float:
    values = [r[key] for r in rows if key in r]
    return sum(values) / len(values) if values else float("nan")


def summarise(per_question: dict[str, dict[str, dict[str, float]]],
              questions: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """half -> mode -> type (and 'all') -> figure -> mean, with n."""
    out: dict[str, Any] = {}
    for half in HALVES:
        qs = [q for q in questions if q["half"] == half]
        out[half] = {}
        for mode in MODES:
            groups = {"all": qs, **{t: [q for q in qs if q["type"] == t] for t in TYPES}}
            out[half][mode] = {}
            for name, group in groups.items():
                rows = [per_question[q["id"]][mode] for q in group]
                cell: dict[str, float] = {"n": len(rows)}
                for key in (*FIGURES, "stale_first@10"):
                    cell[key] = mean(rows, key)
                out[half][mode][name] = cell
    return out


def print_tables(summary: dict[str, Any]) -> None:
    for half in HALVES:
        rows = []
        for mode in MODES:
            for name in ("all", *TYPES):
                c = summary[half][mode][name]
                if not c["n"]:
                    continue
                rows.append([mode, name, int(c["n"]), *(c[f] for f in FIGURES), c["stale_first@10"]])
        h.print_table(f"Conversations, {half} half (k=10; recall@k = share of evidence turns in the top k, "
                      "hit@k = any evidence turn in the top k)",
                      ["mode", "type", "n", "hit@5", "hit@10", "recall@5", "recall@10", "MRR@10",
                       "session hit@10", "session recall@10", "stale first"], rows, digits=3)
        best_leg = max(summary[half][m]["all"]["hit@10"] for m in ("lexical", "vector"))
        hybrid = summary[half]["hybrid"]["all"]["hit@10"]
        print(f"  hybrid hit@10 {hybrid:.3f} vs best single leg {best_leg:.3f}: "
              f"{'ahead' if hybrid > best_leg else 'not ahead'}")


def print_peer_table(summary: dict[str, Any], ms: dict[str, list[float]]) -> None:
    """The held-out half as peers report recall: turn recall@5/@10 and session recall@10 by
    question category, with ms per query (docs/operations.md quotes this table)."""
    rows = []
    for name in ("all", *TYPES):
        c = summary["held-out"]["hybrid"][name]
        rows.append([name, int(c["n"]), c["recall@5"], c["recall@10"], c["session_recall@10"],
                     c["session_hit@10"]])
    h.print_table("Held-out half, hybrid, as peers report it (turn-level evidence recall; session-level "
                  "recall@10 = share of evidence sessions reached by the top 10)",
                  ["category", "n", "turn R@5", "turn R@10", "session R@10", "session hit@10"], rows,
                  digits=3)
    print("  ms per query (socket round trip, k=10): " + ", ".join(
        f"{mode} p50 {percentile(v, 50):.1f} p95 {percentile(v, 95):.1f}" for mode, v in ms.items()))


def percentile(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q / 100 * (len(ordered) - 1)))] if ordered else float("nan")


def source_state() -> str:
    """The commit the run measured, and whether the tree had uncommitted changes."""
    try:
        return subprocess.run(["git", "describe", "--always", "--dirty"], capture_output=True, text=True,
                              cwd=DATA, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


TURNS_FILE = "turns.json"  # daemon id -> turn id, beside a --reuse store


@contextlib.contextmanager
def _root(reuse: Path | None, keep: bool) -> Iterator[Path]:
    """The run's directory: ``reuse`` (created if new, never removed), else a temporary one."""
    if reuse is None:
        with h.workdir("recall-conv", keep=keep) as root:
            yield root
        return
    if len(str(reuse.resolve())) > 60:
        raise SystemExit(f"--reuse {reuse}: use a short path (the daemon's socket lives under it)")
    reuse.mkdir(parents=True, exist_ok=True)
    yield reuse.resolve()


def main(quick: bool, keep: bool, reuse: Path | None = None, sweep: bool = False,
         lexical_index: bool = False) -> None:

    what = "hit@k, recall@k, MRR@10 and session hit@10 per mode"
    h.banner("recall --set conversations", f"{DATA.relative_to(DATA.parents[2])}: {what}", quick)
    dialogues = load_set(quick)
    questions = [{**q, "half": d["split"]} for d in dialogues for q in d["questions"]]
    session_of = {t["id"]: s["id"] for d in dialogues for s in d["sessions"] for t in s["turns"]}
    reader = {q["id"]: project_of(d) for d in dialogues for q in d["questions"]}
    asked_at = {q["id"]: time_ref(q, d) for d in dialogues for q in d["questions"]}
    n_turns = len(session_of)
    print(f"{len(dialogues)} dialogues ({', '.join(d['id'] + ' ' + d['split'] for d in dialogues)}), "
          f"{n_turns} turns, {len(questions)} questions; source {source_state()}")

    with _root(reuse, keep) as root, \
            h.Daemon(root, embedder="bundled", config={
                "governor_enabled": False, **(h.LEXICAL_INDEX_CONFIG if lexical_index else {})}) as daemon:
        t0 = time.perf_counter()
        saved = root / TURNS_FILE
        if saved.exists():
            # A loaded and embedded store from an earlier run with --reuse: the same data dir,
            # searched by the code as it is now (embedding the set is most of a run's time).
            to_turn = json.loads(saved.read_text())
            print(f"reusing {root}: {len(to_turn)} turns loaded by an earlier run")
        else:
            to_turn = load(daemon, dialogues)
        written_s = time.perf_counter() - t0
        h.wait_drained(daemon, "embed")
        h.wait_vector_leg(daemon)
        if lexical_index:
            print(f"lexical index: {h.wait_lexical_index(daemon, required=True)}")
        embedded_s = time.perf_counter() - t0
        if reuse is not None and not saved.exists():
            saved.write_text(json.dumps(to_turn))
        print(f"written in {written_s:.1f} s, embedded by {embedded_s:.1f} s")

        ranked: dict[str, dict[str, list[str]]] = {}
        per_question: dict[str, dict[str, dict[str, float]]] = {}
        ms: dict[str, list[float]] = {mode: [] for mode in MODES}
        t1 = time.perf_counter()
        with daemon.client() as client:
            for q in questions:
                ranked[q["id"]], per_question[q["id"]] = {}, {}
                for mode in MODES:
                    asked = time.perf_counter()
                    res = client.call("memory.search", {"query": q["question"], "mode": mode, "k": K,
                                                        "project": reader[q["id"]],
                                                        "time_ref": asked_at[q["id"]]})
                    ms[mode].append((time.perf_counter() - asked) * 1000)
                    if res["mode_used"] != mode:
                        raise SystemExit(f"{q['id']}: asked {mode}, answered {res['mode_used']}: "
                                         f"{res['notices']}")
                    turns = [to_turn[r["id"]] for r in res["results"]]
                    ranked[q["id"]][mode] = turns
                    per_question[q["id"]][mode] = score(turns, q, session_of)
        search_s = time.perf_counter() - t1
        print(f"{len(questions) * len(MODES)} searches in {search_s:.1f} s")
        variants = None
        if sweep:
            from studies import recall_sweep

            with daemon.client() as client:
                hybrid = {q["id"]: ranked[q["id"]]["hybrid"] for q in questions}
                variants = recall_sweep.sweep(client, questions, reader, asked_at, hybrid,
                                                   to_turn, session_of, score, FIGURES,
                                                   neighbour_ids(dialogues, to_turn))

    summary = summarise(per_question, questions)
    print_tables(summary)
    print_peer_table(summary, ms)
    h.save("recall_conversations_lexical_index" if lexical_index else "recall_conversations", {
        "source": source_state(), "n_dialogues": len(dialogues), "n_turns": n_turns,
        "n_questions": {half: sum(q["half"] == half for q in questions) for half in HALVES},
        "timings_s": {"write": written_s, "embedded": embedded_s, "search": search_s},
        "ms_per_query": {mode: {"p50": percentile(v, 50), "p95": percentile(v, 95)}
                         for mode, v in ms.items()},
        "summary": summary, "sweep": variants,
        "questions": {q["id"]: {"half": q["half"], "type": q["type"], "evidence": q["evidence"],
                                "top10": ranked[q["id"]], "figures": per_question[q["id"]]}
                      for q in questions},
    }, quick)


if __name__ == "__main__":
    raise SystemExit("the conversational set's part of bench/recall.py: run "
                     ".venv/bin/python bench/recall.py --set conversations [--quick] [--sweep]")
