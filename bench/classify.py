"""Classify accuracy and speed on the labelled kinds (issue 14, item 4), with the real embedder.

Sets (tests/data, see its README):

* ``kinds_holdout.jsonl`` (215 notes): never used to choose anything; the figure to quote.
* ``kinds_tune.jsonl`` (218 notes): the notes the cue weights were chosen on. They are also
  shipped as prototypes (memoryd/data/kind_prototypes.json), so each is scored
  **leave-one-out**: its own prototype is removed before it is classified.
* ``kinds.jsonl`` (231 notes, the e2e test's set; 116 of them are tuning notes and are
  scored as the daemon scores them, with their own prototype present).

Classifiers, item for item on the same vectors:

* ``0.1.0``: the classifier before issue 14, frozen here: the first 10 prototypes of each
  kind (the whole 0.1.0 prototype file, kept first and in order), the mean of the 3 best
  similarities, +0.12 for each kind whose 0.1.0 cue regex matches;
* ``embedding only``: today's prototypes and averaging, no cues;
* ``current``: ``PrototypeClassifier.scores``, what the classify pass decides by default.

Speed. The embedder's work is not timed: the embed pass has already stored each vector,
and the classify pass only reads it. Two figures:

* ``decide``: ``ClassifyPass.decide(text, vector, ctx)`` per held-out note (the cue rules,
  the prototype similarities, the margin rule), items/s = notes / wall time, over
  several rounds (the first call's prototype encoding happens before the clock starts);
* ``pass run``: ``ClassifyPass.run`` on a real migrated SQLite store holding the held-out
  notes written as ``auto`` and embedded by the real embed pass (not timed): claiming is
  not timed; each ``run`` of a batch of 32 reads the rows and their vectors, decides,
  writes kind, kind_method, kind_confidence, the audit event and the job completion in
  one transaction. items/s = notes / summed run() wall time.

``--llm`` also asks the bundled LLM (Gemma 3 270M) the pass's shortlist question for every
note whose lead is under ``classify_margin`` (the notes that ``classify_llm = true`` would
send to it), and compares its answers with the embedding's on those notes.

    .venv/bin/python bench/classify.py            # ~3 min on 2 busy cores (mostly loading and encoding)
    .venv/bin/python bench/classify.py --llm      # plus the LLM on the low-margin notes
    .venv/bin/python bench/classify.py --quick    # 40 notes per set
"""

from __future__ import annotations

import json
import re
import shutil
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

import _harness as h
from memoryd.config import DEFAULT_KINDS, Config
from memoryd.models.embedder import LocalEmbedder
from memoryd.passes import classify as cls
from memoryd.passes.base import PassContext
from memoryd.passes.embed import EmbedPass
from memoryd.queue import jobs as jobq
from memoryd.store.engine import create_store_engine
from memoryd.store.memories import NewMemory, WriteContext, request_hash, write_memory
from memoryd.store.migrate import upgrade
from memoryd.text.cues import cue_hits

DATA = h.BENCH_DIR.parent / "tests" / "data"
TOUR = "The staging database is Postgres 15 on db1:5432"  # the README tour's first memory (a fact)
QUICK_N = 40
DECIDE_ROUNDS = 5
KINDS = list(DEFAULT_KINDS)
T0 = 1_780_000_000.0

# -- the 0.1.0 classifier, frozen for the comparison ----------------------------------------
_V010_DAYS = "monday|tuesday|wednesday|thursday|friday|saturday|sunday"
V010_CUES = {
    "task": re.compile(
        r"^\s*(todo|fixme|need to|needs to|remember to|next step|don'?t forget|must|should|follow up)\b"
        r"|\b(todo|action item|before (the )?(release|deadline|[a-z]+ \d))\b", re.I),
    "decision": re.compile(
        r"\b(decided|decision|we chose|chose|opted|agreed (to|on)|settled on|going with|ruled out|"
        r"we will (use|go|move|switch)|switching to|we'?re moving to)\b", re.I),
    "preference": re.compile(
        r"\b(prefers?|preferred|likes?|dislikes?|would rather|i'?d rather|loves?|hates?|favou?rite|"
        r"please (always|never|don'?t)|wants? (the|to have|us to)|can'?t stand)\b", re.I),
    "procedure": re.compile(
        r"^\s*(to [a-z]+[^:]{0,40}:|run |steps?\b|first,? |install |use `|how to)"
        r"|\b(then run|and then|step \d|followed by)\b|(->|=>|→)", re.I),
    "conversation": re.compile(
        r"\b(said|says|asked|told|replied|mentioned|wrote|suggested|complained|"
        r"in (the )?(standup|meeting|call|chat|thread))\b|^\s*(user|assistant)\s*:", re.I),
    "event": re.compile(
        rf"\b(yesterday|today|tonight|last (night|week|month|sprint)|this (morning|afternoon|week)|"
        rf"(on|last) ({_V010_DAYS})|at \d{{1,2}}(:\d{{2}})?\s*(am|pm)?|outage|incident|was paged|"
        rf"went down|shipped|rolled back|happened)\b", re.I),
    "observation": re.compile(
        r"\b(seems?|seemed|looks like|appears?|noticed|tends? to|more often|less often|usually|"
        r"rarely|noticeably|probably|maybe|might be|it looks)\b", re.I),
}
V010_BONUS, V010_TOP_N, V010_PROTOTYPES = 0.12, 3, 10


class V010Classifier:
    """The 0.1.0 scorer: mean of the 3 best of 10 prototypes per kind, +0.12 per matching cue."""

    def __init__(self, embedder: LocalEmbedder):
        examples = cls.load_prototypes()
        self.labels = [k for k in KINDS for _ in examples[k][:V010_PROTOTYPES]]
        self.matrix = embedder.encode([t for k in KINDS for t in examples[k][:V010_PROTOTYPES]])

    def predict(self, vector: np.ndarray, text: str) -> str:
        sims = self.matrix @ vector
        best = {}
        for k in KINDS:
            top = np.sort(sims[[i for i, lab in enumerate(self.labels) if lab == k]])[::-1][:V010_TOP_N]
            cue = V010_CUES.get(k)  # fact had no cue in 0.1.0
            best[k] = float(top.mean()) + (V010_BONUS if cue is not None and cue.search(text) else 0.0)
        return max(KINDS, key=lambda k: best[k])


# -- scoring ------------------------------------------------------------------------------
def load_jsonl(name: str) -> list[dict[str, str]]:
    return [json.loads(line) for line in (DATA / name).read_text(encoding="utf-8").splitlines() if line]


def accuracy(gold: list[str], pred: list[str]) -> dict[str, Any]:
    right = sum(g == p for g, p in zip(gold, pred, strict=True))
    return {"right": right, "n": len(gold), "accuracy": right / len(gold)}


def confusion(gold: list[str], pred: list[str]) -> dict[str, dict[str, int]]:
    """gold kind -> predicted kind -> count."""
    out: dict[str, dict[str, int]] = {k: {} for k in KINDS}
    for g, p in zip(gold, pred, strict=True):
        out[g][p] = out[g].get(p, 0) + 1
    return out


def print_confusion(title: str, table: dict[str, dict[str, int]]) -> None:
    short = [k[:5] for k in KINDS]
    rows = []
    for g in KINDS:
        n = sum(table[g].values())
        rows.append([g, n, table[g].get(g, 0) / n if n else float("nan"),
                     *[table[g].get(p, 0) for p in KINDS]])
    h.print_table(title + " (rows: gold kind; columns: given kind)", ["gold", "n", "right", *short], rows)


def evaluate_set(name: str, rows: list[dict[str, str]], vecs: dict[str, np.ndarray],
                 clf: cls.PrototypeClassifier, v010: V010Classifier, leave_one_out: bool,
                 margin: float) -> dict[str, Any]:
    gold = [r["kind"] for r in rows]
    before = [v010.predict(vecs[r["text"]], r["text"]) for r in rows]
    leave = (lambda t: t) if leave_one_out else (lambda t: None)
    plain = [clf.scores(vecs[r["text"]], "", leave_out=leave(r["text"]))[0][0] for r in rows]
    ranked = [clf.scores(vecs[r["text"]], r["text"], leave_out=leave(r["text"])) for r in rows]
    after = [r[0][0] for r in ranked]
    low = [i for i, r in enumerate(ranked) if r[0][1] - r[1][1] < margin]
    return {
        "file": name, "n": len(rows), "leave_one_out": leave_one_out,
        "before_0_1_0": accuracy(gold, before), "embedding_only": accuracy(gold, plain),
        "after": accuracy(gold, after),
        "after_top3_recall": sum(g in [k for k, _ in r[:3]]
                                 for g, r in zip(gold, ranked, strict=True)) / len(rows),
        "low_margin": {"n": len(low), "right": sum(after[i] == gold[i] for i in low)},
        "confusion_before": confusion(gold, before), "confusion_after": confusion(gold, after),
        "wrong_after": [{"text": rows[i]["text"], "gold": gold[i], "given": after[i],
                         "cues": [c.name for c in cue_hits(rows[i]["text"])]}
                        for i in range(len(rows)) if after[i] != gold[i]],
        "_ranked": ranked, "_gold": gold,
    }


# -- speed ----------------------------------------------------------------------------------
def time_decide(rows: list[dict[str, str]], vecs: dict[str, np.ndarray], ctx: PassContext) -> dict[str, Any]:
    p = cls.ClassifyPass()
    p.decide(rows[0]["text"], vecs[rows[0]["text"]], ctx)  # encodes the prototypes once, untimed
    runs = []
    for _ in range(DECIDE_ROUNDS):
        t0 = time.perf_counter()
        for r in rows:
            p.decide(r["text"], vecs[r["text"]], ctx)
        runs.append(time.perf_counter() - t0)
    best, median = min(runs), sorted(runs)[len(runs) // 2]
    return {"notes": len(rows), "rounds": DECIDE_ROUNDS, "median_s": median,
            "items_per_s_median": len(rows) / median, "items_per_s_best": len(rows) / best}


def time_pass(rows: list[dict[str, str]], embedder: LocalEmbedder) -> dict[str, Any]:
    root = Path(tempfile.mkdtemp(prefix="mdb-classify-", dir="/tmp"))
    try:
        engine = create_store_engine(f"sqlite:///{root / 'memoryd.db'}", busy_timeout_ms=5000)
        upgrade(engine)
        wctx = WriteContext(actor="bench:classify", passes=["embed"], max_attempts=5,
                            idempotency_ttl_s=86400.0)
        stamp = datetime.fromtimestamp(T0, UTC)
        with engine.begin() as conn:
            for r in rows:
                params = {"content": r["text"], "scope": "agent", "agent_id": "bench", "kind": "auto"}
                new = NewMemory(content=r["text"], kind="auto", scope="agent", owner="bench",
                                agent_id="bench", request_hash=request_hash(params))
                write_memory(conn, new, stamp, wctx)
        ctx = PassContext(engine=engine, config=Config(), embedder=embedder, now=lambda: T0)
        embed = EmbedPass()
        while True:  # the embed pass stores the vectors and queues classify (not timed)
            with engine.begin() as conn:
                batch = jobq.claim(conn, "embed", owner="bench", now=T0, lease_s=600, limit=256)
            if not batch:
                break
            embed.run(batch, ctx)
        p = cls.ClassifyPass()
        p.classifier(ctx)  # prototype encoding, once per daemon: not timed
        run_s, done, batches = 0.0, 0, 0
        while True:
            with engine.begin() as conn:
                batch = jobq.claim(conn, "classify", owner="bench", now=T0, lease_s=600, limit=p.batch_size)
            if not batch:
                break
            t0 = time.perf_counter()
            result = p.run(batch, ctx)
            run_s += time.perf_counter() - t0
            done += result.processed
            batches += 1
        engine.dispose()
        return {"notes": len(rows), "classified": done, "batches": batches, "batch_size": p.batch_size,
                "run_s": run_s, "items_per_s": done / run_s if run_s else float("nan")}
    finally:
        shutil.rmtree(root, ignore_errors=True)


# -- the LLM on the low-margin notes ---------------------------------------------------------
def llm_on_low_margin(sets: list[dict[str, Any]], rows_by_set: dict[str, list[dict[str, str]]],
                      clf: cls.PrototypeClassifier, cfg: Config) -> dict[str, Any]:
    from memoryd.models.llm import LlamaCppLLM, bundled_gguf

    llm = LlamaCppLLM(bundled_gguf(Path("/tmp/memoryd-bench-models")), threads=2)
    llm.load()
    out: dict[str, Any] = {}
    for res in sets:
        rows = rows_by_set[res["file"]]
        idx = [i for i, r in enumerate(res["_ranked"]) if r[0][1] - r[1][1] < cfg.classify_margin]
        emb_right = llm_right = 0
        seconds = []
        for i in idx:
            shortlist = [k for k, _ in res["_ranked"][i][:cls.LLM_SHORTLIST]]
            t0 = time.perf_counter()
            answer = llm.complete(cls.few_shot_prompt(clf.examples, rows[i]["text"]),
                                  grammar=cls.kind_grammar(shortlist), max_tokens=6,
                                  timeout_s=cfg.llm_timeout_s, family="classify").strip()
            seconds.append(time.perf_counter() - t0)
            llm_right += answer == res["_gold"][i]
            emb_right += res["_ranked"][i][0][0] == res["_gold"][i]
        out[res["file"]] = {"low_margin_notes": len(idx), "embedding_right": emb_right,
                            "llm_right": llm_right,
                            "llm_s_per_note": sum(seconds) / len(seconds) if seconds else None}
    return out


def main() -> None:
    p = h.parser(__doc__.split("\n\n")[0],
                 baseline='the 0.1.0 classifier, frozen in this bench, item for item on the same vectors.')
    p.add_argument("--llm", action="store_true", help="also ask the bundled LLM on the low-margin notes")
    args = p.parse_args()
    h.banner("classify", "kind accuracy (before/after, held-out and tuning) and items/s, real embedder",
             args.quick)
    cfg = Config()
    sets = [("kinds_holdout.jsonl", False), ("kinds_tune.jsonl", True), ("kinds.jsonl", False)]
    rows_by_set = {name: load_jsonl(name)[:QUICK_N] if args.quick else load_jsonl(name) for name, _ in sets}

    embedder = LocalEmbedder("bundled")
    t0 = time.perf_counter()
    embedder.load()
    load_s = time.perf_counter() - t0
    texts = sorted({r["text"] for rows in rows_by_set.values() for r in rows} | {TOUR})
    vecs = dict(zip(texts, embedder.encode(texts), strict=True))
    clf = cls.PrototypeClassifier(list(cfg.kinds))
    t0 = time.perf_counter()
    clf.ready(embedder)
    ready_s = time.perf_counter() - t0
    v010 = V010Classifier(embedder)
    print(f"embedder loaded in {load_s:.1f} s; {sum(len(v) for v in clf.examples.values())} prototypes "
          f"encoded in {ready_s:.1f} s (once per daemon, not in the items/s below)")

    results = [evaluate_set(name, rows_by_set[name], vecs, clf, v010, loo, cfg.classify_margin)
               for name, loo in sets]
    h.print_table("accuracy (right / n)", ["set", "n", "0.1.0", "embedding only", "current", "top-3 recall"],
                  [[r["file"] + (" (leave-one-out)" if r["leave_one_out"] else ""), r["n"],
                    r["before_0_1_0"]["accuracy"], r["embedding_only"]["accuracy"], r["after"]["accuracy"],
                    r["after_top3_recall"]] for r in results], digits=3)
    hold = results[0]
    print_confusion("held-out, 0.1.0 classifier", hold["confusion_before"])
    print_confusion("held-out, current classifier", hold["confusion_after"])
    print_confusion("tuning (leave-one-out), current classifier", results[1]["confusion_after"])
    for r in results:
        print(f"  {r['file']}: lead under classify_margin {cfg.classify_margin} on {r['low_margin']['n']} of "
              f"{r['n']} notes ({r['low_margin']['right']} of those right)")

    tour = clf.scores(embedder.encode([TOUR])[0], TOUR)
    print(f"\nREADME tour, {TOUR!r}: {tour[0][0]} (lead {tour[0][1] - tour[1][1]:.3f}); "
          + ", ".join(f"{k} {s:.3f}" for k, s in tour[:3]) + f"; cues: {[c.name for c in cue_hits(TOUR)]}")

    ctx = PassContext(engine=None, config=cfg, embedder=embedder, now=lambda: T0)  # type: ignore[arg-type]
    decide = time_decide(rows_by_set["kinds_holdout.jsonl"], vecs, ctx)
    run = time_pass(rows_by_set["kinds_holdout.jsonl"], embedder)
    h.print_table("speed (the embedding is not timed: the embed pass stored each vector before)",
                  ["what is timed", "notes", "items/s"],
                  [[f"ClassifyPass.decide per note (median of {decide['rounds']} rounds)", decide["notes"],
                    decide["items_per_s_median"]],
                   [f"ClassifyPass.run on SQLite, {run['batches']} batches of <= {run['batch_size']} "
                    "(read row+vector, decide, write kind+audit+job)", run["classified"],
                    run["items_per_s"]]],
                  digits=1)

    out: dict[str, Any] = {
        "sets": [{k: v for k, v in r.items() if not k.startswith("_")} for r in results],
        "tour": {"text": TOUR, "kind": tour[0][0], "scores": tour[:3],
                 "cues": [c.name for c in cue_hits(TOUR)]},
        "speed": {"decide": decide, "pass_run": run, "embedder_load_s": load_s,
                  "prototypes_encode_s": ready_s},
        "config": {"classify_margin": cfg.classify_margin, "top_n": cls.TOP_N,
                   "prototypes": {k: len(v) for k, v in clf.examples.items()}},
    }
    if args.llm:
        out["llm_low_margin"] = llm_on_low_margin(results, rows_by_set, clf, cfg)
        h.print_table(f"bundled LLM on the notes with a lead under {cfg.classify_margin} (shortlist of 3)",
                      ["set", "notes", "embedding right", "LLM right", "s per LLM call"],
                      [[name, v["low_margin_notes"], v["embedding_right"], v["llm_right"],
                        v["llm_s_per_note"] or "-"] for name, v in out["llm_low_margin"].items()])
    h.save("classify", out, args.quick)


if __name__ == "__main__":
    main()
