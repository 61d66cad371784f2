"""The model worker: a child process that holds the models.

The daemon starts it on demand (``python -m memoryd.models.worker --fd N``)
and talks to it over a socketpair with pickled messages in bounded frames
(models/frames.py). Its options (the embedder and LLM specs, the data dir…)
come as the first message on that pipe, never on its command line: an LLM URL
may carry a token, and any local user can read a process's command line
(PROTOCOL.md 1.2 "Secrets"). Running models here
means the daemon's memory returns to its baseline when the worker exits
after ``--idle-s`` without requests, and a native crash in torch or
llama.cpp kills this process, failing one job attempt, not the daemon.

Requests are ``{"id", "op", ...}``; each is answered ``{"id", "ok", "result"}``
or ``{"id", "ok": False, "error"}``. Requests run on a small thread pool, so a
search's query encode need not wait behind a pass's batch.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import socket
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from memoryd.errors import PassUnavailable
from memoryd.models.frames import MAX_FRAME_BYTES, FramedSocket

#: How long a new worker waits for its options (the daemon sends them as it starts it).
CONFIGURE_WAIT_S = 60.0


def serve(conn: FramedSocket, embedder_spec: str, idle_s: float, batch_size: int, llm_spec: str = "none",
          data_dir: str = ".", llm_threads: int = 2) -> int:
    """Answer requests until the parent goes away or we sit idle for ``idle_s``."""
    from pathlib import Path

    from memoryd.models.embedder import LocalEmbedder
    from memoryd.models.llm import LLM, LLMUnavailable, build_llm

    embedder = LocalEmbedder(embedder_spec, batch_size=batch_size)
    llm_box: dict[str, LLM | None] = {}
    llm_lock = threading.Lock()

    def get_llm() -> LLM:
        with llm_lock:
            if "llm" not in llm_box:
                llm_box["llm"] = build_llm(llm_spec, Path(data_dir), threads=llm_threads)
            llm = llm_box["llm"]
        if llm is None:
            raise LLMUnavailable("the LLM is disabled (llm = none)")
        return llm
    send_lock = threading.Lock()
    state = {"inflight": 0, "last": time.monotonic()}
    state_lock = threading.Lock()

    def reply(msg: dict[str, Any]) -> None:
        with send_lock:
            conn.send(msg)

    def handle(req: dict[str, Any]) -> None:
        try:
            if req["op"] == "embed":
                vectors = embedder.encode(req["texts"], threads=req.get("threads"))
                reply({"id": req["id"], "ok": True, "result": vectors})
            elif req["op"] == "load":
                embedder.load()
                reply({"id": req["id"], "ok": True, "result": embedder.path})
            elif req["op"] == "llm_load":
                llm = get_llm()
                llm.load()  # type: ignore[attr-defined]
                reply({"id": req["id"], "ok": True, "result": llm.name})
            elif req["op"] == "complete":
                text = get_llm().complete(
                    req["prompt"], grammar=req.get("grammar"), schema=req.get("schema"),
                    max_tokens=req.get("max_tokens", 64), timeout_s=req.get("timeout_s", 60.0),
                    threads=req.get("threads"), stop=req.get("stop"), family=req.get("family", "default"),
                )
                reply({"id": req["id"], "ok": True, "result": text})
            elif req["op"] == "ping":
                reply({"id": req["id"], "ok": True, "result": os.getpid()})
            else:
                reply({"id": req["id"], "ok": False, "error": f"unknown op {req['op']!r}"})
        except Exception as exc:  # reported to the caller, who fails its job attempt
            reply({"id": req["id"], "ok": False, "error": f"{type(exc).__name__}: {exc}",
                   "unavailable": isinstance(exc, PassUnavailable)})
        finally:
            with state_lock:
                state["inflight"] -= 1
                state["last"] = time.monotonic()

    pool = ThreadPoolExecutor(2, thread_name_prefix="worker")
    while True:
        if conn.poll(1.0):
            try:
                req = conn.recv()
            except (EOFError, OSError):
                return 0  # the daemon went away
            if req.get("op") == "exit":
                break
            with state_lock:
                state["inflight"] += 1
            pool.submit(handle, req)
            continue
        with state_lock:
            idle = state["inflight"] == 0 and time.monotonic() - state["last"] > idle_s
        if idle:
            break
    pool.shutdown(wait=True)
    with contextlib.suppress(OSError):
        reply({"id": None, "ok": True, "result": "bye"})
    return 0


def read_options(conn: FramedSocket) -> list[str]:
    """The worker's options, from the ``configure`` message the daemon sends first."""
    if not conn.poll(CONFIGURE_WAIT_S):
        raise SystemExit(f"memoryd model worker: no options from the daemon within {CONFIGURE_WAIT_S:.0f} s")
    msg = conn.recv()
    if not isinstance(msg, dict) or msg.get("op") != "configure" or not isinstance(msg.get("args"), list):
        raise SystemExit("memoryd model worker: the daemon's first message was not its options")
    return [str(a) for a in msg["args"]]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="memoryd model worker (started by the daemon; its options "
                                                 "come on the pipe, after --fd)")
    parser.add_argument("--fd", type=int, required=True)
    parser.add_argument("--embedder", default="bundled")
    parser.add_argument("--idle-s", type=float, default=300.0)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--log-level", default="info")
    parser.add_argument("--llm", default="none")
    parser.add_argument("--data-dir", default=".")
    parser.add_argument("--llm-threads", type=int, default=2)
    parser.add_argument("--max-frame-bytes", type=int, default=MAX_FRAME_BYTES)
    fd = parser.parse_args(argv).fd
    conn = FramedSocket(socket.socket(fileno=fd))
    try:
        args = parser.parse_args(["--fd", str(fd), *read_options(conn)])
    except BaseException:
        conn.close()
        raise
    # The daemon's limit both ways: an answer over it is refused here, as an error answer.
    conn.max_frame_bytes = args.max_frame_bytes
    from memoryd.log import configure_logging

    configure_logging(args.log_level, "json")
    try:
        return serve(conn, args.embedder, args.idle_s, args.batch_size, llm_spec=args.llm,
                     data_dir=args.data_dir, llm_threads=args.llm_threads)
    finally:
        conn.close()


if __name__ == "__main__":
    sys.exit(main())
