"""Reflect and consolidate decisions on labelled pairs, and pass throughput at 10k memories (issue 6).

1. Reflect on tests/data/lifecycle_pairs.jsonl (positives: ``updates`` and
   ``contradicts``). The gate is what the pass checks before asking the LLM:
   the neighbour cosine (>= ``reflect_min_cosine``, real embedder) AND
   ``passes.reflect.is_candidate``. A proposal is what the pass raises with the
   configured ``reflect_llm_veto``: off (the default) the gate decides and the
   LLM only labels updates|contradicts; on, the LLM judge's 4-way answer must
   also be updates/contradicts (both reported, the judge being the pass's
   prompt and grammar on the bundled Gemma, asked about every pair any swept
   gate lets through). Reported: the gate alone, the proposals, the label
   accuracy, the false-proposal rate on ``compatible`` pairs (target 0 with the
   default config) and every failing pair with its note; a prototype gate
   (``gate_v2``, below) is measured beside the shipped one, with sweeps.
2. Consolidate on the same pairs against the ``duplicate`` labels: loose
   equality → collapse; else cosine >= ``merge_min_cosine`` AND content-word
   jaccard >= ``merge_min_jaccard`` AND equal value slots → merge proposal
   (the pass also requires the same kind; pairs carry none, so that test is
   left out: it can only lower recall). A threshold sweep shows the trade-off.
3. Throughput: a real ``memoryd run`` (bundled embedder, ``--llm bundled``,
   governor off) on a temp dir takes N synthetic but varied memories through
   ``memory.write_many`` (``kind: auto``, a controlled share of them later
   updates of an earlier one); ``daemon.status`` is polled until the embed,
   classify, consolidate and reflect queues are drained. Extract jobs are
   parked (their ``run_after`` moved a day ahead) unless ``--with-extract``:
   extract costs seconds per memory and is measured by bench/cognition.py;
   left in, it shares every cycle with the others (see the report).

    .venv/bin/python bench/lifecycle.py              # full run: pairs + 10k memories
    .venv/bin/python bench/lifecycle.py --quick      # pairs + 1k memories
    .venv/bin/python bench/lifecycle.py --skip-throughput
"""

from __future__ import annotations

import contextlib
import json
import random
import re
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

import _harness as h
from memoryd.config import Config
from memoryd.models.embedder import LocalEmbedder
from memoryd.models.llm import LlamaCppLLM, LLMUnavailable, bundled_gguf
from memoryd.passes import reflect as rf
from memoryd.store.driver import connect
from memoryd.text import values as vals
from memoryd.text.normalize import jaccard, loose
from memoryd.text.values import value_slots

DATA = h.BENCH_DIR.parent / "tests" / "data"
MODEL_CACHE = Path("/tmp/memoryd-bench-models")
POSITIVE = ("updates", "contradicts")
AGENT = "bench-lifecycle"


def load_pairs() -> list[dict[str, Any]]:
    return [json.loads(line) for line in (DATA / "lifecycle_pairs.jsonl").read_text().splitlines() if line]


def pr(pred: list[bool], gold: list[bool]) -> dict[str, Any]:
    tp = sum(p and g for p, g in zip(pred, gold, strict=True))
    fp = sum(p and not g for p, g in zip(pred, gold, strict=True))
    fn = sum(g and not p for p, g in zip(pred, gold, strict=True))
    return {"tp": tp, "fp": fp, "fn": fn, "precision": tp / (tp + fp) if tp + fp else float("nan"),
            "recall": tp / (tp + fn) if tp + fn else float("nan")}


# -- a prototype gate -----------------------------------------------------------------
#: text/values.py's NUMBER ends with (?![\w.]), so "Node 18." (a number that ends a sentence) is
#: no value at all; this one only refuses a following word character or a ".digit".
FIXED_NUMBER = re.compile(r"(?<![\w.])\d+(?:\.\d+)?%?(?![\w]|\.\d)")
# The shipped gate's value and subject normalisation (passes/reflect.py), reused here.
_norm_value = rf._norm_value
_subject_words = rf._subject_words


@contextlib.contextmanager
def fixed_number_values() -> Iterator[None]:
    """Swap the NUMBER extractor for FIXED_NUMBER while the block runs (the prototype only)."""
    old = vals.KINDS["number"]
    vals.KINDS["number"] = FIXED_NUMBER
    try:
        yield
    finally:
        vals.KINDS["number"] = old


_TEMPORAL = re.compile(r"\b(monday|tuesday|wednesday|thursday|friday|saturday|sunday|today|tomorrow|"
                       r"yesterday|tonight|(this|next|last) (week|weekend|month|sprint|quarter|year))\b",
                       re.I)


def values_v2(text: str) -> list[str]:
    """Slot values with FIXED_NUMBER, normalised, plus day names and relative times ("next week")."""
    with fixed_number_values():
        found = value_slots(text)[1]
    return sorted([_norm_value(v) for v in found] + [m.group(0).lower() for m in _TEMPORAL.finditer(text)])


def gate_v2(a: str, b: str, min_containment: float = 1.0) -> str | None:
    """A prototype of the reflect gate, measured beside the shipped one:

    1. numbers at the end of a sentence are values (FIXED_NUMBER);
    2. values compare normalised (a leading "v", a trailing "/") and as a multiset, so a
       reordered or reformatted restatement is not a change;
    3. when two or more values all change at once, it is another thing (v2.3.0 on May 14 vs
       v2.3.1 on May 21), not a change of one;
    4. subjects match by containment (the words of the shorter masked subject all occur in the
       longer one, plural 's' folded), not by jaccard: an update usually adds words ("Upgraded
       Terraform to <v> across all workspaces"), a different subject swaps one (billing/shipping).
    """
    with fixed_number_values():
        if loose(a) == loose(b):
            return None
        subj_a, vals_a = value_slots(a)
        subj_b, vals_b = value_slots(b)
    if not vals_a or not vals_b or sorted(map(_norm_value, vals_a)) == sorted(map(_norm_value, vals_b)):
        return None
    if len(vals_a) >= 2 and len(vals_a) == len(vals_b) and all(x != y for x, y in zip(vals_a, vals_b,
                                                                                        strict=True)):
        return None
    wa, wb = _subject_words(subj_a), _subject_words(subj_b)
    containment = 1.0 if subj_a == subj_b else (len(wa & wb) / min(len(wa), len(wb)) if wa and wb else 0.0)
    if containment < min_containment:
        return None
    return f"same subject (containment {containment:.2f}), values {vals_a} → {vals_b}"


# -- reflect and consolidate on the pairs ------------------------------------------------
def judge(llm: LlamaCppLLM, older: str, newer: str, cfg: Config, allowed: tuple[str, ...]) -> str:
    """The pass's judge call: its prompt, a grammar over ``allowed``, the answer validated."""
    grammar = "root ::= " + " | ".join(f'" {r}"' for r in allowed)
    answer = llm.complete(rf.judge_prompt(older, newer), grammar=grammar, max_tokens=4,
                          timeout_s=cfg.llm_timeout_s, family="reflect").strip()
    if answer not in allowed:
        raise ValueError(f"the LLM answered {answer!r}")
    return answer


def pairs_bench(pairs: list[dict[str, Any]], embedder: LocalEmbedder, llm: LlamaCppLLM | None,
                cfg: Config) -> dict[str, Any]:
    a_vecs = embedder.encode([p["a"] for p in pairs])
    b_vecs = embedder.encode([p["b"] for p in pairs])
    cos = [float(x @ y) for x, y in zip(a_vecs, b_vecs, strict=True)]
    labels = [p["label"] for p in pairs]
    gold_pos = [lab in POSITIVE for lab in labels]
    # Reflect -------------------------------------------------------------------------
    near = [c >= cfg.reflect_min_cosine for c in cos]
    cand = [rf.is_candidate(p["b"], p["a"], cfg.reflect_subject_jaccard) is not None for p in pairs]
    cand2 = [gate_v2(p["b"], p["a"]) is not None for p in pairs]
    gate = [n and c for n, c in zip(near, cand, strict=True)]
    gate2 = [n and c for n, c in zip(near, cand2, strict=True)]
    # The judge only ever sees gated pairs: ask it about every pair any swept gate lets through.
    judged = [c >= 0.4 and (rf.is_candidate(p["b"], p["a"], 0.5) is not None
                            or gate_v2(p["b"], p["a"], 0.7) is not None)
              for c, p in zip(cos, pairs, strict=True)]
    relations: list[str | None] = [None] * len(pairs)  # 4-way (reflect_llm_veto = true)
    labels2: list[str | None] = [None] * len(pairs)  # updates | contradicts (the default)
    judge_s = 0.0
    if llm is not None:
        t0 = time.perf_counter()
        for i, p in enumerate(pairs):
            if judged[i]:
                relations[i] = judge(llm, p["a"], p["b"], cfg, rf.RELATIONS)
                labels2[i] = judge(llm, p["a"], p["b"], cfg, POSITIVE)
        judge_s = time.perf_counter() - t0
    says_pos = [r in POSITIVE for r in relations]
    veto = [g and s for g, s in zip(gate, says_pos, strict=True)]
    veto2 = [g and s for g, s in zip(gate2, says_pos, strict=True)]
    # What the pass proposes with the configured reflect_llm_veto.
    proposal = veto if cfg.reflect_llm_veto else gate
    proposal2 = veto2 if cfg.reflect_llm_veto else gate2
    by_label = Counter(labels)
    n_judged = sum(judged)

    def rate(pred: list[bool], label: str) -> dict[str, Any]:
        k = sum(p for p, lab in zip(pred, labels, strict=True) if lab == label)
        return {"proposed": k, "of": by_label[label], "rate": k / by_label[label]}

    def label_accuracy(gated: list[bool]) -> dict[str, Any]:
        idx = [i for i in range(len(pairs)) if gated[i] and gold_pos[i] and labels2[i] is not None]
        right = sum(labels2[i] == labels[i] for i in idx)
        return {"right": right, "of": len(idx), "answers": dict(Counter(labels2[i] for i in idx))}

    reflect: dict[str, Any] = {
        "positives": sum(gold_pos), "by_label": dict(by_label), "reflect_llm_veto": cfg.reflect_llm_veto,
        "neighbour_cosine_only": pr(near, gold_pos),
        "is_candidate_only": pr(cand, gold_pos),
        "gate": pr(gate, gold_pos),
        "proposal": pr(proposal, gold_pos),
        "proposal_with_veto": pr(veto, gold_pos) if llm is not None else None,
        "gate_v2": pr(gate2, gold_pos),
        "proposal_v2": pr(proposal2, gold_pos),
        "proposal_v2_with_veto": pr(veto2, gold_pos) if llm is not None else None,
        "false_proposals_compatible": rate(proposal, "compatible"),
        "false_proposals_duplicate": rate(proposal, "duplicate"),
        "false_proposals_compatible_v2": rate(proposal2, "compatible"),
        "gate_on_compatible": rate(gate, "compatible"), "gate_on_duplicate": rate(gate, "duplicate"),
        "gate_v2_on_compatible": rate(gate2, "compatible"),
        "judged_pairs": n_judged,
        "judge_ms_per_call": 500 * judge_s / n_judged if llm is not None and n_judged else None,
        "judge4_on_judged": dict(Counter(f"{lab}->{r}" for lab, r in zip(labels, relations, strict=True)
                                         if r is not None)),
        "label_accuracy_gate": label_accuracy(gate) if llm is not None else None,
        "label_accuracy_gate_v2": label_accuracy(gate2) if llm is not None else None,
    }
    rows: list[list[Any]] = []
    for name in ("neighbour_cosine_only", "is_candidate_only", "gate", "proposal", "proposal_with_veto",
                 "gate_v2", "proposal_v2", "proposal_v2_with_veto"):
        f = reflect[name]
        if f is None:
            continue
        rows.append([name, f["tp"], f["fp"], f["fn"], f["precision"], f["recall"]])
    h.print_table(f"reflect on lifecycle_pairs.jsonl (positives: updates+contradicts = {sum(gold_pos)}; "
                  f"reflect_min_cosine {cfg.reflect_min_cosine}, reflect_subject_jaccard "
                  f"{cfg.reflect_subject_jaccard}, reflect_llm_veto {cfg.reflect_llm_veto})",
                  ["decision", "tp", "fp", "fn", "precision", "recall"], rows, digits=3)
    print(f"  false proposals (configured): compatible {reflect['false_proposals_compatible']}, duplicate "
          f"{reflect['false_proposals_duplicate']}; with gate_v2: compatible "
          f"{reflect['false_proposals_compatible_v2']}")
    if llm is not None:
        print(f"  judge: {n_judged} gated pairs, {reflect['judge_ms_per_call']:.0f} ms per call; "
              f"4-way answers (label->answer): {reflect['judge4_on_judged']}")
        print(f"  updates|contradicts label right on gated positives: shipped gate "
              f"{reflect['label_accuracy_gate']}, gate_v2 {reflect['label_accuracy_gate_v2']}")
    # Why positives miss the gate, and which negatives pass it.
    misses = []
    for i, p in enumerate(pairs):
        sa, va = value_slots(p["a"])
        sb, vb = value_slots(p["b"])
        why = ("cosine-below-min" if not near[i] else "no-value-on-a-side" if not va or not vb
               else "same-values" if va == vb else f"subject-jaccard {jaccard(sa, sb):.2f}" if sa != sb
               else "?")
        if gold_pos[i] and not gate[i]:
            misses.append({"kind": "missed by gate", "label": p["label"], "why": why, "cos": round(cos[i], 3),
                           "a": p["a"], "b": p["b"], "note": p["note"]})
        elif gate[i] and not gold_pos[i]:
            misses.append({"kind": "gate fires on negative", "label": p["label"], "cos": round(cos[i], 3),
                           "judge": relations[i], "proposed": proposal[i], "a": p["a"], "b": p["b"],
                           "note": p["note"]})
        elif gold_pos[i] and gate[i] and llm is not None and not says_pos[i]:
            misses.append({"kind": "judge says no", "label": p["label"], "judge": relations[i],
                           "a": p["a"], "b": p["b"], "note": p["note"]})
    reflect["failures"] = misses
    with fixed_number_values():
        no_value_v2 = sum(1 for i, p in enumerate(pairs) if gold_pos[i] and not gate2[i]
                          and (not value_slots(p["a"])[1] or not value_slots(p["b"])[1]))
    reflect["gate_v2_misses_without_values"] = no_value_v2
    print(f"  positives gate_v2 misses: {sum(gold_pos) - reflect['gate_v2']['tp']}, of which {no_value_v2} "
          "have no value on one side (names, regions, tools, weekdays: words, not values)")
    print(f"  why positives miss the shipped gate: "
          f"{dict(Counter(m['why'].split(' ')[0] for m in misses if m['kind'] == 'missed by gate'))}")
    for m in misses:
        if m["kind"] != "missed by gate":
            print(f"  {m['kind']}: [{m['label']}] judge={m.get('judge')} {m['a']!r} / {m['b']!r}")
    # Gate sweep (no extra LLM calls: the judge answered every pair).
    sweep = []
    for min_cos in (0.4, 0.5, 0.6, 0.7):
        for subj in (0.5, 0.6, 0.7, 0.8, 0.9, 1.0):
            g = [c >= min_cos and rf.is_candidate(p["b"], p["a"], subj) is not None
                 for c, p in zip(cos, pairs, strict=True)]
            prop = [x and s for x, s in zip(g, says_pos, strict=True)] if cfg.reflect_llm_veto else g
            f = pr(prop, gold_pos)
            fc = sum(x for x, lab in zip(prop, labels, strict=True) if lab == "compatible")
            sweep.append({"min_cosine": min_cos, "subject_jaccard": subj, **f, "false_on_compatible": fc})
    reflect["sweep"] = sweep
    sweep2 = []
    for min_cos in (0.5, 0.6):
        for contain in (0.7, 0.8, 0.9, 1.0):
            g = [c >= min_cos and gate_v2(p["b"], p["a"], contain) is not None
                 for c, p in zip(cos, pairs, strict=True)]
            prop = [x and s for x, s in zip(g, says_pos, strict=True)] if cfg.reflect_llm_veto else g
            f, fg = pr(prop, gold_pos), pr(g, gold_pos)
            fc = sum(x for x, lab in zip(prop, labels, strict=True) if lab == "compatible")
            sweep2.append({"min_cosine": min_cos, "containment": contain, "gate_tp": fg["tp"],
                           "gate_fp": fg["fp"], **f, "false_on_compatible": fc})
    reflect["sweep_v2"] = sweep2
    h.print_table("reflect proposal sweep (gate thresholds x the same judge answers)",
                  ["min cosine", "subject jaccard", "tp", "fp", "precision", "recall", "false on compatible"],
                  [[s["min_cosine"], s["subject_jaccard"], s["tp"], s["fp"], s["precision"], s["recall"],
                    s["false_on_compatible"]] for s in sweep], digits=3)
    h.print_table("reflect proposal sweep, prototype gate_v2 (containment of masked subjects)",
                  ["min cosine", "containment", "gate tp", "gate fp", "tp", "fp", "precision", "recall",
                   "false on compatible"],
                  [[s["min_cosine"], s["containment"], s["gate_tp"], s["gate_fp"], s["tp"], s["fp"],
                    s["precision"], s["recall"], s["false_on_compatible"]] for s in sweep2], digits=3)
    for p, g in zip(pairs, gate2, strict=True):
        if g:
            print(f"  gate_v2 passes [{p['label']}]: {p['a']!r} / {p['b']!r}")
    # Consolidate ----------------------------------------------------------------------
    gold_dup = [lab == "duplicate" for lab in labels]
    exact = [loose(p["a"]) == loose(p["b"]) for p in pairs]
    jac = [jaccard(p["a"], p["b"]) for p in pairs]
    same_vals = [value_slots(p["a"])[1] == value_slots(p["b"])[1] for p in pairs]

    def consolidate(min_cos: float, min_jac: float, need_vals: bool = True) -> list[bool]:
        return [e or (c >= min_cos and j >= min_jac and (v or not need_vals))
                for e, c, j, v in zip(exact, cos, jac, same_vals, strict=True)]

    vals2 = [values_v2(p["a"]) == values_v2(p["b"]) for p in pairs]

    def consolidate_v2(min_cos: float, min_jac: float) -> list[bool]:
        return [e or (c >= min_cos and j >= min_jac and v)
                for e, c, j, v in zip(exact, cos, jac, vals2, strict=True)]

    shipped = consolidate(cfg.merge_min_cosine, cfg.merge_min_jaccard)
    merge_only = [s and not e for s, e in zip(shipped, exact, strict=True)]
    cons: dict[str, Any] = {
        "duplicates": sum(gold_dup), "collapse": pr(exact, gold_dup),
        "merge_proposals": pr(merge_only, [g and not e for g, e in zip(gold_dup, exact, strict=True)]),
        "collapse_or_merge": pr(shipped, gold_dup),
        "fires_on": dict(Counter(lab for s, lab in zip(shipped, labels, strict=True) if s)),
    }
    csweep = []
    for min_cos in (0.75, 0.8, 0.85, 0.9, 0.93, 0.95):
        for min_jac in (0.3, 0.4, 0.5, 0.6):
            for need in (True, False):
                f = pr(consolidate(min_cos, min_jac, need), gold_dup)
                csweep.append({"min_cosine": min_cos, "min_jaccard": min_jac, "equal_values": need, **f})
    cons["sweep"] = csweep
    cons["sweep_v2"] = [{"min_cosine": c, "min_jaccard": j, **pr(consolidate_v2(c, j), gold_dup)}
                        for c in (0.8, 0.85, 0.9, 0.93) for j in (0.3, 0.4, 0.5, 0.6)]
    for name, pred in (("shipped", shipped), ("v2 @ shipped thresholds",
                                               consolidate_v2(cfg.merge_min_cosine, cfg.merge_min_jaccard))):
        for p, x, g, c, j in zip(pairs, pred, gold_dup, cos, jac, strict=True):
            if x and not g:
                print(f"  consolidate {name} false positive [{p['label']}] cos {c:.3f} jac {j:.2f}: "
                      f"{p['a']!r} / {p['b']!r}")
    cons["pairs"] = [{"label": lab, "cos": round(c, 3), "jaccard": round(j, 2), "same_values": v,
                      "exact": e, "a": p["a"], "b": p["b"]}
                     for p, lab, c, j, v, e in zip(pairs, labels, cos, jac, same_vals, exact, strict=True)
                     if lab == "duplicate" or (c >= 0.8 and j >= 0.4)]
    h.print_table(f"consolidate on lifecycle_pairs.jsonl (duplicates: {sum(gold_dup)}; merge_min_cosine "
                  f"{cfg.merge_min_cosine}, merge_min_jaccard {cfg.merge_min_jaccard})",
                  ["decision", "tp", "fp", "fn", "precision", "recall"],
                  [[k, cons[k]["tp"], cons[k]["fp"], cons[k]["fn"], cons[k]["precision"], cons[k]["recall"]]
                   for k in ("collapse", "merge_proposals", "collapse_or_merge")], digits=3)
    print(f"  fires on labels: {cons['fires_on']}")
    best = sorted(csweep, key=lambda s: (not s["precision"] >= 0.999, -s["recall"], -s["precision"]))
    h.print_table("consolidate sweep (precision 1.0 first, then recall)",
                  ["min cosine", "min jaccard", "equal values", "tp", "fp", "precision", "recall"],
                  [[s["min_cosine"], s["min_jaccard"], s["equal_values"], s["tp"], s["fp"], s["precision"],
                    s["recall"]] for s in best[:14]], digits=3)
    h.print_table("consolidate prototype v2 (fixed numbers, normalised values, day names and relative times "
                  "as values)", ["min cosine", "min jaccard", "tp", "fp", "precision", "recall"],
                  [[s["min_cosine"], s["min_jaccard"], s["tp"], s["fp"], s["precision"], s["recall"]]
                   for s in cons["sweep_v2"]], digits=3)
    dup_stats = [(c, j, v) for c, j, v, g, e in zip(cos, jac, same_vals, gold_dup, exact, strict=True)
                 if g and not e]
    print(f"  paraphrased duplicates (n={len(dup_stats)}): cosine p50 "
          f"{np.median([d[0] for d in dup_stats]):.3f}"
          f", jaccard p50 {np.median([d[1] for d in dup_stats]):.2f}, equal values "
          f"{sum(d[2] for d in dup_stats)}/{len(dup_stats)}")
    neg_hi = sorted(((c, lab, p["a"], p["b"]) for c, lab, p in zip(cos, labels, pairs, strict=True)
                     if lab != "duplicate"), reverse=True)[:5]
    for c, lab, a, b in neg_hi:
        print(f"  highest-cosine non-duplicate: {c:.3f} [{lab}] {a!r} / {b!r}")
    return {"reflect": reflect, "consolidate": cons}


# -- throughput --------------------------------------------------------------------------
_ADJ = ["amber", "brisk", "cobalt", "dusky", "ember", "fable", "gusty", "hazel", "ivory", "jolly", "karst",
        "lunar", "mossy", "noble", "opal", "pine", "quartz", "rusty", "sable", "tidal", "umber", "vivid",
        "willow", "xenial", "yonder", "zesty", "arctic", "boreal", "coral", "delta"]
_NOUN = ["ledger", "gateway", "indexer", "mailer", "scheduler", "billing", "profile", "reports", "ingest",
         "webhooks", "checkout", "search", "catalog", "auth", "exporter", "notifier", "uploader", "metrics",
         "tracker", "sync", "pricing", "inventory", "audit", "renderer", "router", "quota", "archive",
         "cdn", "chat", "vault"]
_PEOPLE = ["Ana", "Bilal", "Chen", "Dana", "Emeka", "Farah", "Goran", "Hana", "Ines", "Jonas", "Kofi",
           "Lena", "Mateo", "Nadia", "Omar", "Pia", "Quinn", "Rosa", "Sven", "Tara"]
_TOOLS = ["Postgres", "Redis", "Kafka", "nginx", "Terraform", "Helm", "pytest", "ruff", "Celery", "Go",
          "Rust", "TypeScript", "Node", "Grafana", "Sentry", "ClickHouse"]
_VERBS = ["retries failed uploads", "caches tokens", "batches writes", "streams events", "rotates keys",
          "compacts logs", "throttles clients", "shards tenants", "signs payloads", "dedupes messages"]
#: (template, kind) — kinds as a labeller would give them, values in {braces}.
_TEMPLATES = [
    ("The {svc} service listens on port {port}.", "fact"),
    ("{svc} runs {tool} {ver} in staging.", "fact"),
    ("{person} owns the {svc} service and reviews its migrations.", "fact"),
    ("Run `make -C {svc} test` before pushing changes to {svc}.", "procedure"),
    ("To restart {svc}: drain the queue, then `systemctl restart {svc}`, then check /healthz.", "procedure"),
    ("TODO: move {svc} off {tool} before the {month} release.", "task"),
    ("Need to add an index on {svc}.events(created_at); queries take {n} s.", "task"),
    ("We decided that {svc} {verb} instead of calling the API directly, to cut p99.", "decision"),
    ("Decision: {svc} keeps {tool}; the migration was not worth {n} weeks.", "decision"),
    ("{person} prefers small PRs for {svc}, with the schema change in its own commit.", "preference"),
    ("{person} likes {tool} for {svc} and dislikes ORMs there.", "preference"),
    ("Yesterday {svc} went down for {n} minutes after a bad deploy; rolled back.", "event"),
    ("The {svc} outage on {month} {day} was caused by an expired certificate.", "event"),
    ("{svc} seems to leak memory under load; RSS grows ~{n}% per hour.", "observation"),
    ("It looks like {svc} tests are flaky when run in parallel, about 1 in {n} runs.", "observation"),
    ("{person} said in standup that {svc} {verb} now.", "conversation"),
    ("{person} asked whether {svc} could move to {tool}; {person2} said not this quarter.", "conversation"),
]
_MONTHS = ["March", "April", "May", "June", "July", "August", "September", "October"]


def synthetic_memories(n: int, seed: int = 11, update_share: float = 0.05) -> list[str]:
    """``n`` distinct notes over ~900 service names x 17 templates; ``update_share`` of them restate an
    earlier note's subject with a new value (a reflect candidate), as a real agent's store has."""
    rng = random.Random(seed)
    out: list[str] = []
    fills: list[tuple[str, dict[str, Any]]] = []
    seen: set[str] = set()
    while len(out) < n:
        if fills and rng.random() < update_share:
            template, values = rng.choice(fills)
            values = {**values, "port": rng.randint(1024, 65000), "n": rng.randint(2, 90),
                      "ver": f"{rng.randint(1, 20)}.{rng.randint(0, 9)}", "day": rng.randint(1, 28)}
        else:
            template = rng.choice(_TEMPLATES)[0]
            values = {"svc": f"{rng.choice(_ADJ)}-{rng.choice(_NOUN)}", "port": rng.randint(1024, 65000),
                      "tool": rng.choice(_TOOLS), "ver": f"{rng.randint(1, 20)}.{rng.randint(0, 9)}",
                      "person": rng.choice(_PEOPLE), "person2": rng.choice(_PEOPLE),
                      "month": rng.choice(_MONTHS), "day": rng.randint(1, 28), "n": rng.randint(2, 90),
                      "verb": rng.choice(_VERBS)}
        text = template.format(**values)
        if text in seen:
            continue
        seen.add(text)
        fills.append((template, values))
        out.append(text)
    return out


class LLMDaemon(h.Daemon):
    """The bench harness's daemon, with the LLM switched on."""

    def __init__(self, *args: Any, llm: str = "bundled", **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.llm = llm

    def command(self) -> list[str]:
        cmd = super().command()
        cmd[cmd.index("--llm") + 1] = self.llm
        return cmd


PASSES = ("embed", "classify", "consolidate", "reflect")


def throughput_bench(n: int, with_extract: bool, max_wait_s: float, keep: bool) -> dict[str, Any]:
    texts = synthetic_memories(n)
    stats = h.text_stats(texts)
    print(f"\nthroughput: {n} synthetic memories (mean {stats['mean_bytes']:.0f} bytes), kind auto")
    with h.workdir("lifecycle", keep=keep) as root:
        d = LLMDaemon(root, embedder="bundled", config={"governor_enabled": False}, label="drain")
        d.start()
        try:
            # Load both models before the clock starts (first use would otherwise count).
            t0 = time.perf_counter()
            d.call("memory.write", {"content": "warm-up note: the warm-up service listens on port 1.",
                                    "agent_id": "warm", "kind": "auto"})
            if not with_extract:
                park_extract(d.data_dir / "memoryd.db")
            h.wait_drained(d, "embed", timeout_s=300)
            h.wait_drained(d, "classify", timeout_s=300)
            h.wait_drained(d, "reflect", timeout_s=300)
            with d.client() as c:  # a warm-up extraction already running finishes first
                while c.call("daemon.status")["queues"]["extract"]["leased"]:
                    time.sleep(0.5)
            warm_s = time.perf_counter() - t0
            base = d.call("daemon.status")["passes"]
            host = h.HostLoad()
            t_start = time.time()
            parked = 0
            with d.client() as c:
                for i in range(0, n, 500):
                    items = [{"content": t, "agent_id": AGENT, "kind": "auto"} for t in texts[i:i + 500]]
                    c.call("memory.write_many", {"items": items})
                    if not with_extract:
                        parked += park_extract(d.data_dir / "memoryd.db")
            write_s = time.time() - t_start
            done_at: dict[str, float] = {}
            status: dict[str, Any] = {}
            deadline = time.monotonic() + max_wait_s
            with d.client() as c:
                while True:
                    status = c.call("daemon.status")
                    for name in PASSES:
                        if name not in done_at and h.queue_open(status, name) == 0 and \
                                (name == "embed" or "embed" in done_at):
                            done_at[name] = time.time()
                    if all(name in done_at for name in PASSES) or time.monotonic() > deadline:
                        break
                    time.sleep(0.5)
            load = host.stop()
            result: dict[str, Any] = {"n": n, "text": stats, "warm_up_s": warm_s, "write_s": write_s,
                                      "extract_parked": parked, "with_extract": with_extract,
                                      "host": load, "passes": {}}
            rows = []
            busy = busy_from_log(d, t_start)
            for name in (*PASSES, "extract"):
                p = status["passes"].get(name, {})
                b = base.get(name, {})
                processed = p.get("processed_total", 0) - b.get("processed_total", 0)
                batches, busy_s = busy.get(name, (0, 0.0))
                drained = done_at.get(name)
                q = status["queues"].get(name, {})
                entry = {"processed": processed, "drained_after_s": (drained - t_start) if drained else None,
                         "wall_items_per_s": processed / (drained - t_start) if drained else None,
                         "busy_s": busy_s, "busy_items_per_s": processed / busy_s if busy_s else None,
                         "batches": batches, "left": h.queue_open(status, name), "queue": q,
                         "errors_total": p.get("errors_total"), "note": p.get("note")}
                result["passes"][name] = entry
                rows.append([name, processed, entry["drained_after_s"] or float("nan"),
                             entry["wall_items_per_s"] or float("nan"), busy_s or float("nan"),
                             entry["busy_items_per_s"] or float("nan"), entry["left"]])
            h.print_table(f"pass throughput at {n} memories (clock from the first write; busy = the pass's "
                          "own batch time from daemon.status)",
                          ["pass", "processed", "drained after s", "items/s (wall)", "busy s",
                           "items/s (busy)", "left"], rows, digits=1)
            print(f"  writes took {write_s:.1f} s; warm-up (model loads) {warm_s:.1f} s; other tenants' CPU "
                  f"{load['others_pct']:.0f}%; extract jobs parked: {parked}")
            with d.client() as c:
                result["reviews_open"] = c.call("daemon.status")["reviews_open"]
            result["proposals"] = proposal_counts(d.data_dir / "memoryd.db")
            result["classify_methods"] = classify_methods(d.data_dir / "memoryd.db")
            result["supersede_samples"] = proposal_samples(d.data_dir / "memoryd.db")
            for texts in result["supersede_samples"][:4]:
                print(f"  supersede proposed: {' / '.join(repr(t) for t in texts)}")
            print(f"  proposals: {result['proposals']}; classify methods: {result['classify_methods']}")
            result["errors_logged"] = len(d.errors())
        finally:
            code = d.stop()
            print(f"  daemon SIGTERM exit {code}")
    return result


def busy_from_log(d: h.Daemon, since: float) -> dict[str, tuple[int, float]]:
    """(batches, seconds) per pass from the daemon's ``pass.done`` log lines after ``since``."""
    out: dict[str, tuple[int, float]] = {}
    for ev in d.events("pass.done"):
        if h.log_time(ev) < since:
            continue
        name = ev.get("pass_") or ev.get("pass")
        batches, secs = out.get(name, (0, 0.0))
        out[name] = (batches + 1, secs + float(ev.get("ms", 0.0)) / 1000)
    return out


def park_extract(db: Path) -> int:
    """Move ready extract jobs a day ahead (they stay queued; the others are measured without them)."""
    conn = connect(str(db), timeout_s=30)
    try:
        with conn:
            cur = conn.execute("UPDATE jobs SET run_after = run_after + 86400 WHERE pass = 'extract' "
                               "AND state = 'ready' AND run_after < ?", (time.time() + 3600,))
            return cur.rowcount
    finally:
        conn.close()


def proposal_counts(db: Path) -> dict[str, int]:
    conn = connect(str(db), timeout_s=30)
    try:
        return {f"{k}:{s}": n for k, s, n in conn.execute(
            "SELECT kind, status, count(*) FROM proposals GROUP BY kind, status")}
    finally:
        conn.close()


def proposal_samples(db: Path, n: int = 8) -> list[list[str]]:
    """The texts of a few supersede proposals (to see what the gate let through)."""
    conn = connect(str(db), timeout_s=30)
    try:
        rows = conn.execute("SELECT memory_ids FROM proposals WHERE kind = 'supersede' ORDER BY created_at "
                            "LIMIT ?", (n,)).fetchall()
        out = []
        for (ids,) in rows:
            texts = [conn.execute("SELECT content FROM memories WHERE id = ?", (i,)).fetchone()[0]
                     for i in json.loads(ids)]
            out.append(texts)
        return out
    finally:
        conn.close()


def classify_methods(db: Path) -> dict[str, int]:
    conn = connect(str(db), timeout_s=30)
    try:
        return {str(m): n for m, n in conn.execute(
            "SELECT kind_method, count(*) FROM memories WHERE derived = 0 GROUP BY kind_method")}
    finally:
        conn.close()


def main() -> None:
    p = h.parser(__doc__.splitlines()[0],
                 baseline=('the labels of tests/data/lifecycle_pairs.jsonl for decisions; absolute jobs/s for'
                           ' throughput.'))
    p.add_argument("--skip-pairs", action="store_true")
    p.add_argument("--skip-throughput", action="store_true")
    p.add_argument("-n", type=int, default=None, help="memories for the throughput run (10000; --quick 1000)")
    p.add_argument("--with-extract", action="store_true", help="leave extract jobs in the round-robin")
    p.add_argument("--max-wait", type=float, default=2400.0, help="give up waiting for the drain after (s)")
    args = p.parse_args()
    h.banner("lifecycle", "reflect/consolidate decisions on labelled pairs; pass throughput", args.quick)
    cfg = Config()
    results: dict[str, Any] = {"config": {k: getattr(cfg, k) for k in (
        "reflect_min_cosine", "reflect_subject_jaccard", "merge_min_cosine", "merge_min_jaccard")}}
    if not args.skip_pairs:
        embedder = LocalEmbedder("bundled")
        embedder.load()
        llm: LlamaCppLLM | None = None
        try:
            llm = LlamaCppLLM(bundled_gguf(MODEL_CACHE), threads=1)
            llm.load()
        except LLMUnavailable as exc:
            print(f"LLM unavailable ({exc}); the judge is skipped")
            llm = None
        results.update(pairs_bench(load_pairs(), embedder, llm, cfg))
        del embedder, llm
    if not args.skip_throughput:
        n = args.n or (1000 if args.quick else 10000)
        results["throughput"] = throughput_bench(n, args.with_extract, args.max_wait, args.keep)
    carry_over(results, args.quick)
    h.save("lifecycle", results, args.quick)


def carry_over(results: dict[str, Any], quick: bool) -> None:
    """Keep the sections this run skipped from the previous results file (marked as carried over)."""
    path = h.RESULTS_DIR / ("lifecycle.quick.json" if quick else "lifecycle.json")
    if not path.exists():
        return
    previous = json.loads(path.read_text())
    for section in ("reflect", "consolidate", "throughput"):
        if section not in results and section in previous:
            results[section] = {**previous[section],
                                "carried_over_from": previous[section].get("carried_over_from",
                                                                           previous.get("finished_at"))}


if __name__ == "__main__":
    main()

