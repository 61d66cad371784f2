"""Classify and extract quality on the labelled data (issue 5), with the real components.

No daemon: the pass logic is called directly on the same items, so methods can
be compared item for item.

1. classify on tests/data/kinds.jsonl, beside the majority-class baseline:
   * ``embedding+cues``: memoryd.passes.classify.PrototypeClassifier top-1, every item
     (and ``embedding`` alone: the same scores without the surface-cue bonus);
   * ``llm``: the pass's few-shot prompt, the grammar over all configured kinds;
   * ``combined``: the pass's rule: the embedding when its lead over #2 is at least
     ``classify_margin``, else the LLM restricted to the embedding's top 3.
   Coverage of the embedding at the configured margin, and a margin sweep (the
   LLM's shortlist answer is taken for every item once, so the sweep needs no
   more calls). items/s of each method exclude model loading.
2. extract on tests/data/extract.jsonl: the pass's prompt/schema/validate and
   find_deterministic. Entities are matched by key = normalise(alias map(name))
   and type, per note; precision/recall for deterministic-only, LLM-only and
   combined. A kept fact is correct when it is grounded (validate keeps only
   those) and its content-word F1 with the best labelled fact is >= 0.6; the
   raw answer's grounded rate, dropped ungrounded / invented-vocabulary
   outputs and invalid answers are counted.

    .venv/bin/python bench/cognition.py              # full run (~10 min with the bundled model)
    .venv/bin/python bench/cognition.py --quick      # smoke subset
    .venv/bin/python bench/cognition.py --llm /path/to/bigger.gguf   # also evaluate that GGUF
"""

from __future__ import annotations

import json
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import _harness as h
from memoryd.config import Config
from memoryd.models.embedder import LocalEmbedder
from memoryd.models.llm import LlamaCppLLM, LLMError, LLMUnavailable, bundled_gguf
from memoryd.passes import classify as cls
from memoryd.passes import extract as ext
from memoryd.text.entities import find_deterministic, normalise
from memoryd.text.grounding import grounded
from memoryd.text.normalize import content_words

DATA = h.BENCH_DIR.parent / "tests" / "data"
MODEL_CACHE = Path("/tmp/memoryd-bench-models")
FACT_MATCH_F1 = 0.6
QUICK_KINDS = 48
QUICK_EXTRACT = 12


def load_jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


# -- models ------------------------------------------------------------------------
def load_llms(extra: list[str], threads: int = 2) -> dict[str, LlamaCppLLM]:
    """The bundled GGUF (assembled once into MODEL_CACHE), plus any --llm paths; loaded now."""
    llms: dict[str, LlamaCppLLM] = {}
    specs: list[tuple[str, Path]] = []
    try:
        specs.append(("bundled", bundled_gguf(MODEL_CACHE)))
    except LLMUnavailable as exc:
        print(f"bundled LLM unavailable: {exc}")
    for path in extra:
        specs.append((Path(path).name, Path(path)))
    for label, path in specs:
        llm = LlamaCppLLM(path, threads=threads)
        t0 = time.perf_counter()
        try:
            llm.load()
        except LLMUnavailable as exc:
            print(f"LLM {label} unavailable: {exc}")
            continue
        print(f"LLM {label}: {path} loaded in {time.perf_counter() - t0:.1f} s")
        llms[label] = llm
    return llms


# -- classify ------------------------------------------------------------------------
def classify_bench(rows: list[dict[str, Any]], embedder: LocalEmbedder, llms: dict[str, LlamaCppLLM],
                   cfg: Config) -> dict[str, Any]:
    kinds = list(cfg.kinds)
    texts = [r["text"] for r in rows]
    gold = [r["kind"] for r in rows]
    n = len(rows)
    clf = cls.PrototypeClassifier(kinds)
    clf.ready(embedder)
    embedder.encode(["warm-up"])
    t0 = time.perf_counter()
    vecs = embedder.encode(texts)
    ranked = [clf.scores(v, t) for v, t in zip(vecs, texts, strict=True)]
    emb_s = time.perf_counter() - t0
    plain = [clf.scores(v, "") for v in vecs]  # no cue bonus
    margins = [r[0][1] - r[1][1] for r in ranked]
    emb_pred = [r[0][0] for r in ranked]
    majority_kind, majority_n = Counter(gold).most_common(1)[0]

    def acc(pred: list[str | None], idx: list[int] | None = None) -> float:
        idx = list(range(n)) if idx is None else idx
        return sum(pred[i] == gold[i] for i in idx) / len(idx) if idx else float("nan")

    covered = [i for i in range(n) if margins[i] >= cfg.classify_margin]
    out: dict[str, Any] = {
        "n": n, "kinds": kinds, "margin": cfg.classify_margin,
        "majority": {"kind": majority_kind, "accuracy": majority_n / n},
        "embedding_plain": {"accuracy": acc([r[0][0] for r in plain])},
        "embedding_cues": {"accuracy": acc(emb_pred), "items_per_s": n / emb_s,
                           "coverage_at_margin": len(covered) / n,
                           "accuracy_when_covered": acc(emb_pred, covered),
                           "top3_recall": sum(gold[i] in [k for k, _ in ranked[i][:3]]
                                              for i in range(n)) / n},
        "llm": {},
    }
    rows_table: list[list[Any]] = [
        ["majority class (" + majority_kind + ")", n, majority_n / n, "-", "-"],
        ["embedding (no cues)", n, out["embedding_plain"]["accuracy"], "-", "-"],
        ["embedding+cues", n, acc(emb_pred), n / emb_s, "-"],
    ]
    full_grammar = cls.kind_grammar(clf.kinds)
    per_llm: dict[str, Any] = {}
    for label, llm in llms.items():
        alone: list[str | None] = []
        short: list[str | None] = []
        alone_s: list[float] = []
        short_s: list[float] = []
        invented = 0
        for i, text in enumerate(texts):
            prompt = cls.few_shot_prompt(clf.examples, text)
            t0 = time.perf_counter()
            answer = llm.complete(prompt, grammar=full_grammar, max_tokens=6, timeout_s=cfg.llm_timeout_s,
                                  family="classify")
            alone_s.append(time.perf_counter() - t0)
            kind = answer.strip()
            invented += kind not in kinds
            alone.append(kind if kind in kinds else None)
            shortlist = [k for k, _ in ranked[i][:cls.LLM_SHORTLIST]]
            t0 = time.perf_counter()
            answer = llm.complete(prompt, grammar=cls.kind_grammar(shortlist), max_tokens=6,
                                  timeout_s=cfg.llm_timeout_s, family="classify")
            if (i + 1) % 25 == 0:
                print(f"  classify {i + 1}/{n}: {sum(alone_s) / (i + 1):.2f} s per LLM-alone call",
                      flush=True)
            short_s.append(time.perf_counter() - t0)
            kind = answer.strip()
            invented += kind not in shortlist
            short.append(kind if kind in shortlist else None)
        emb_each = emb_s / n

        def combined(margin: float, alone_: list[str | None] = alone, short_: list[str | None] = short,
                     short_s_: list[float] = short_s, emb_each_: float = emb_each) -> dict[str, Any]:
            pred = [emb_pred[i] if margins[i] >= margin else short_[i] for i in range(n)]
            llm_idx = [i for i in range(n) if margins[i] < margin]
            secs = emb_each_ * n + sum(short_s_[i] for i in llm_idx)
            return {"margin": margin, "accuracy": acc(pred), "llm_share": len(llm_idx) / n,
                    "accuracy_llm_part": acc(pred, llm_idx), "accuracy_embedding_part":
                    acc(pred, [i for i in range(n) if i not in set(llm_idx)]), "items_per_s": n / secs}

        sweep = [combined(m) for m in (0.0, 0.02, 0.03, 0.05, 0.08, 0.1, 0.15, 0.2, 1.0)]
        at_cfg = combined(cfg.classify_margin)
        llm_idx = [i for i in range(n) if margins[i] < cfg.classify_margin]
        per_llm[label] = {
            "llm_alone": {"accuracy": acc(alone), "items_per_s": n / sum(alone_s),
                          "ms_per_item": 1000 * sum(alone_s) / n,
                          "confusion": confusion(gold, alone)},
            "llm_shortlist_all_items": {"accuracy": acc(short), "ms_per_item": 1000 * sum(short_s) / n},
            "combined": at_cfg,
            "embedding_on_llm_items": acc(emb_pred, llm_idx),
            "invented_kinds": invented,
            "sweep": sweep,
        }
        rows_table += [
            [f"LLM alone [{label}]", n, acc(alone), n / sum(alone_s), "-"],
            [f"combined @ {cfg.classify_margin} [{label}]", n, at_cfg["accuracy"], at_cfg["items_per_s"],
             at_cfg["llm_share"]],
        ]
    out["llm"] = per_llm
    h.print_table("classify on tests/data/kinds.jsonl (accuracy; items/s exclude model loading)",
                  ["method", "items", "accuracy", "items/s", "LLM share"], rows_table, digits=3)
    print(f"  embedding coverage at margin {cfg.classify_margin}: {len(covered)}/{n} "
          f"({len(covered) / n:.1%}), accuracy on covered {acc(emb_pred, covered):.3f}; "
          f"gold kind in embedding top-3: {out['embedding_cues']['top3_recall']:.3f}")
    for label, res in per_llm.items():
        h.print_table(f"combined, margin sweep [{label}]",
                      ["margin", "accuracy", "LLM share", "acc LLM part", "acc embedding part", "items/s"],
                      [[s["margin"], s["accuracy"], s["llm_share"], s["accuracy_llm_part"],
                        s["accuracy_embedding_part"], s["items_per_s"]] for s in res["sweep"]], digits=3)
        print(f"  on the items below the margin the embedding alone scores "
              f"{res['embedding_on_llm_items']:.3f}; invented kinds from the LLM: {res['invented_kinds']}")
        pred_counts = Counter(k for k in res["llm_alone"]["confusion"]["predicted"])
        print(f"  LLM alone predicted distribution: {dict(pred_counts)}")
    return out


def confusion(gold: list[str], pred: list[str | None]) -> dict[str, Any]:
    pairs = Counter(f"{g}->{p}" for g, p in zip(gold, pred, strict=True) if g != p)
    return {"errors": dict(pairs.most_common(12)), "predicted": [p or "(invalid)" for p in pred]}


# -- extract -------------------------------------------------------------------------
def entity_key(name: str, aliases: dict[str, str]) -> str:
    return normalise(aliases.get(name, name))


def _stem(word: str) -> str:
    return word[:-1] if len(word) > 3 and word.endswith("s") and not word.endswith("ss") else word


def fact_f1(a: str, b: str) -> float:
    """Content-word F1 of two statements (plural 's' folded)."""
    wa = {_stem(w) for w in content_words(a)}
    wb = {_stem(w) for w in content_words(b)}
    common = len(wa & wb)
    if not common:
        return 0.0
    p, r = common / len(wa), common / len(wb)
    return 2 * p * r / (p + r)


class PR:
    """Micro-averaged precision/recall over per-note sets."""

    def __init__(self) -> None:
        self.tp = self.pred = self.gold = 0
        self.by_type: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0])

    def add(self, pred: set[tuple[str, str]], gold: set[tuple[str, str]]) -> None:
        self.tp += len(pred & gold)
        self.pred += len(pred)
        self.gold += len(gold)
        for _, t in pred & gold:
            self.by_type[t][0] += 1
        for _, t in pred:
            self.by_type[t][1] += 1
        for _, t in gold:
            self.by_type[t][2] += 1

    def figures(self) -> dict[str, Any]:
        p = self.tp / self.pred if self.pred else float("nan")
        r = self.tp / self.gold if self.gold else float("nan")
        return {"precision": p, "recall": r, "f1": 2 * p * r / (p + r) if p + r else 0.0, "tp": self.tp,
                "predicted": self.pred, "gold": self.gold,
                "by_type": {t: {"tp": v[0], "predicted": v[1], "gold": v[2]} for t, v in
                            sorted(self.by_type.items())}}


def extract_bench(rows: list[dict[str, Any]], aliases: dict[str, str], llms: dict[str, LlamaCppLLM],
                  cfg: Config, timeout_s: float) -> dict[str, Any]:
    types = list(cfg.entity_types)
    schema = ext.schema(types)
    det_pr = PR()
    t0 = time.perf_counter()
    dets = [find_deterministic(r["text"]) for r in rows]
    det_s = time.perf_counter() - t0
    golds = [{(entity_key(e["name"], aliases), e["type"]) for e in r["entities"]} for r in rows]
    for det, gold in zip(dets, golds, strict=True):
        det_pr.add({(entity_key(f.name, aliases), f.type) for f in det}, gold)
    # Facts without a model: what validate keeps from an empty answer (the source's own clauses).
    clause_kept = clause_correct = clause_gold_matched = 0
    for row in rows:
        facts = ext.validate(row["text"], {"entities": [], "facts": []}, types, []).facts
        clause_kept += len(facts)
        clause_correct += sum(1 for f in facts if max((fact_f1(f, g) for g in row["facts"]), default=0.0)
                              >= FACT_MATCH_F1)
        clause_gold_matched += sum(1 for g in row["facts"]
                                   if any(fact_f1(f, g) >= FACT_MATCH_F1 for f in facts))
    gold_total = sum(len(r["facts"]) for r in rows)
    clause_facts = {"kept": clause_kept, "correct": clause_correct,
                    "precision": clause_correct / clause_kept if clause_kept else float("nan"),
                    "recall": clause_gold_matched / gold_total}
    out: dict[str, Any] = {"n": len(rows), "deterministic": {**det_pr.figures(),
                                                            "items_per_s": len(rows) / det_s},
                           "facts_without_llm": clause_facts, "llm": {}}
    table: list[list[Any]] = [["deterministic only", *_pr_row(det_pr), len(rows) / det_s]]
    examples: dict[str, list[Any]] = {}
    for label, llm in llms.items():
        comb_pr, llm_pr = PR(), PR()
        kept = correct = raw_facts = raw_grounded = 0
        gold_facts = gold_matched = 0
        dropped_ungrounded = dropped_vocab = invalid = dropped_entities = timeouts = over_default = 0
        secs = 0.0
        bad: list[dict[str, Any]] = []
        for row, det, gold in zip(rows, dets, golds, strict=True):
            text = row["text"]
            t0 = time.perf_counter()
            try:
                raw = llm.complete(ext.prompt(text), schema=schema, max_tokens=320, timeout_s=timeout_s,
                                   family="extract")
                over_default += time.perf_counter() - t0 > cfg.llm_timeout_s
            except LLMError as exc:  # the pass fails the attempt; scored like an invalid answer
                secs += time.perf_counter() - t0
                timeouts += 1
                bad.append({"text": text, "invalid": str(exc)})
                comb_pr.add({(entity_key(f.name, aliases), f.type) for f in det}, gold)
                llm_pr.add(set(), gold)
                gold_facts += len(row["facts"])
                continue
            try:
                answer = json.loads(raw)
                ex = ext.validate(text, answer, types, find_deterministic(text))
            except ValueError as exc:  # JSONDecodeError is a ValueError
                secs += time.perf_counter() - t0
                invalid += 1
                bad.append({"text": text, "invalid": f"{type(exc).__name__}: {exc}", "raw": raw[-200:]})
                comb_pr.add({(entity_key(f.name, aliases), f.type) for f in det}, gold)
                llm_pr.add(set(), gold)
                gold_facts += len(row["facts"])
                continue
            secs += time.perf_counter() - t0
            print(f"  extract {rows.index(row) + 1}/{len(rows)}: {time.perf_counter() - t0:.0f} s",
                  flush=True)
            only_llm = ext.validate(text, answer, types, [])
            llm_pr.add({(entity_key(f.name, aliases), f.type) for f in only_llm.entities}, gold)
            comb_pr.add({(entity_key(f.name, aliases), f.type) for f in ex.entities}, gold)
            ent_dropped = sum(1 for e in answer["entities"][:ext.MAX_ENTITIES]
                              if e.get("type") in types and e["name"].strip().lower() not in text.lower())
            dropped_entities += ent_dropped
            dropped_ungrounded += ex.dropped_ungrounded
            dropped_vocab += ex.dropped_vocabulary
            facts_raw = [" ".join(f.split()) for f in answer["facts"][:ext.MAX_FACTS] if isinstance(f, str)]
            raw_facts += len(facts_raw)
            raw_grounded += sum(1 for f in facts_raw if f and grounded(f, text))
            kept += len(ex.facts)
            matched_here = []
            for fact in ex.facts:
                best = max((fact_f1(fact, g) for g in row["facts"]), default=0.0)
                ok = best >= FACT_MATCH_F1
                correct += ok
                matched_here.append((fact, round(best, 2)))
            gold_facts += len(row["facts"])
            gold_matched += sum(1 for g in row["facts"]
                                if any(fact_f1(f, g) >= FACT_MATCH_F1 for f in ex.facts))
            if len(bad) < 8 and (ex.dropped_ungrounded or any(s < FACT_MATCH_F1 for _, s in matched_here)):
                bad.append({"text": text, "facts": matched_here, "dropped_ungrounded": ex.dropped_ungrounded,
                            "raw": raw[:400]})
        n_ok = len(rows) - invalid
        res = {
            "combined": comb_pr.figures(), "llm_only": llm_pr.figures(),
            "facts": {"kept": kept, "correct": correct,
                      "precision": correct / kept if kept else float("nan"),
                      "recall": gold_matched / gold_facts if gold_facts else float("nan"),
                      "raw": raw_facts, "raw_grounded_rate": raw_grounded / raw_facts if raw_facts else
                      float("nan"), "per_note": kept / n_ok if n_ok else float("nan")},
            "dropped_ungrounded": dropped_ungrounded, "dropped_ungrounded_entities": dropped_entities,
            "dropped_ungrounded_facts": dropped_ungrounded - dropped_entities,
            "dropped_vocabulary": dropped_vocab, "invalid_answers": invalid, "timeouts": timeouts,
            "over_default_timeout": over_default, "timeout_s": timeout_s,
            "items_per_s": len(rows) / secs, "s_per_item": secs / len(rows),
        }
        out["llm"][label] = res
        examples[label] = bad
        table += [[f"LLM only [{label}]", *_pr_row(llm_pr), len(rows) / secs],
                  [f"deterministic + LLM [{label}]", *_pr_row(comb_pr), len(rows) / secs]]
    h.print_table("extract entities on tests/data/extract.jsonl (match: normalised name via the alias map, "
                  "and type)", ["method", "precision", "recall", "F1", "tp", "predicted", "gold", "items/s"],
                  table, digits=3)
    h.print_table("extract facts without the LLM (validate on an empty answer: the source's own clauses)",
                  ["kept", "correct", "precision", "recall of labelled"],
                  [[clause_facts["kept"], clause_facts["correct"], clause_facts["precision"],
                    clause_facts["recall"]]], digits=3)
    for label, res in out["llm"].items():
        f = res["facts"]
        h.print_table(f"extract facts [{label}] (correct = grounded AND content-word F1 >= {FACT_MATCH_F1} "
                      "with the best labelled fact)",
                      ["kept", "correct", "precision", "recall of labelled", "raw facts", "raw grounded rate",
                       "facts/note"],
                      [[f["kept"], f["correct"], f["precision"], f["recall"], f["raw"],
                        f["raw_grounded_rate"], f["per_note"]]], digits=3)
        h.print_table(f"extract drops [{label}]",
                      ["ungrounded entities", "ungrounded facts", "invented vocabulary", "invalid answers",
                       f"timeouts (> {timeout_s:.0f} s)", f"over llm_timeout_s {cfg.llm_timeout_s:.0f} s",
                       "s/item"],
                      [[res["dropped_ungrounded_entities"], res["dropped_ungrounded_facts"],
                        res["dropped_vocabulary"], res["invalid_answers"], res["timeouts"],
                        res["over_default_timeout"], res["s_per_item"]]],
                      digits=2)
        by_type = res["combined"]["by_type"]
        h.print_table(f"combined entities by type [{label}]", ["type", "tp", "predicted", "gold", "recall"],
                      [[t, v["tp"], v["predicted"], v["gold"], v["tp"] / v["gold"] if v["gold"] else
                        float("nan")] for t, v in by_type.items()], digits=2)
        for item in examples[label][:4]:
            print(f"  e.g. {json.dumps(item, ensure_ascii=False)[:400]}")
    out["examples"] = examples
    return out


def _pr_row(pr: PR) -> list[Any]:
    f = pr.figures()
    return [f["precision"], f["recall"], f["f1"], f["tp"], f["predicted"], f["gold"]]


def main() -> None:
    p = h.parser(__doc__.splitlines()[0],
                 baseline=("the majority class for classify; for extract, the LLM's raw answers before "
                           'grounding.'))
    p.add_argument("--llm", action="append", default=[], metavar="PATH",
                   help="another GGUF to evaluate beside the bundled one (repeatable)")
    p.add_argument("--skip-classify", action="store_true")
    p.add_argument("--threads", type=int, default=2, help="LLM threads (the daemon's model_threads is 2)")
    p.add_argument("--skip-extract", action="store_true")
    p.add_argument("--llm-timeout", type=float, default=None,
                   help="per-extraction timeout (default: llm_timeout_s); slower ones are counted either way")
    p.add_argument("--extract-n", type=int, default=None,
                   help="only the first N extract notes (the bundled model needs ~30-60 s per note)")
    args = p.parse_args()
    h.banner("cognition", "classify and extract quality against tests/data (real embedder and LLM)",
             args.quick)
    cfg = Config()
    kinds_rows = load_jsonl(DATA / "kinds.jsonl")
    extract_rows = load_jsonl(DATA / "extract.jsonl")
    aliases = json.loads((DATA / "entity_aliases.json").read_text())["canonical"]
    if args.quick:
        kinds_rows, extract_rows = kinds_rows[:QUICK_KINDS], extract_rows[:QUICK_EXTRACT]
    if args.extract_n:
        extract_rows = extract_rows[:args.extract_n]
    embedder = LocalEmbedder("bundled")
    embedder.load()
    llms = load_llms(args.llm, args.threads)
    results: dict[str, Any] = {"extract_items": len(extract_rows), "llm_threads": args.threads,
                               "llms": {k: v.model_path for k, v in llms.items()},
                               "config": {"classify_margin": cfg.classify_margin, "kinds": list(cfg.kinds),
                                          "entity_types": list(cfg.entity_types)}}
    if not args.skip_classify:
        results["classify"] = classify_bench(kinds_rows, embedder, llms, cfg)
    if not args.skip_extract:
        timeout_s = args.llm_timeout or cfg.llm_timeout_s
        results["extract"] = extract_bench(extract_rows, aliases, llms, cfg, timeout_s)
    carry_over(results, args.quick)
    h.save("cognition", results, args.quick)


def carry_over(results: dict[str, Any], quick: bool) -> None:
    """Keep a section this run skipped from the previous results file (marked as carried over)."""
    path = h.RESULTS_DIR / ("cognition.quick.json" if quick else "cognition.json")
    if not path.exists():
        return
    previous = json.loads(path.read_text())
    for section in ("classify", "extract"):
        if section not in results and section in previous:
            results[section] = {**previous[section],
                                "carried_over_from": previous[section].get("carried_over_from",
                                                                           previous.get("finished_at"))}


if __name__ == "__main__":
    main()
