"""Method handlers: one table per socket; the agent socket never has operator verbs."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Awaitable, Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, Engine
from sqlalchemy.exc import OperationalError

from memoryd import PROTOCOL_VERSION, __version__
from memoryd.clock import to_rfc3339, utcnow
from memoryd.config import Config
from memoryd.errors import Forbidden, InvalidParams, MemorydError, MethodNotFound, NotFound
from memoryd.models.embedder import EmbedderAPI
from memoryd.queue import jobs as jobq
from memoryd.rerank.stage import stage_for
from memoryd.service import validation
from memoryd.service.committer import GroupCommitter
from memoryd.store import audit, entities, lifecycle, links, listing, projects, proposals, review, search
from memoryd.store import memories as mem
from memoryd.store.engine import read_only
from memoryd.store.ids import is_memory_id
from memoryd.store.memories import WriteContext
from memoryd.store.schema import OWNER_FIELDS
from memoryd.store.scope import missing_key_notice
from memoryd.store.writes import WriteUnit, is_store_condition, store_error

Handler = Callable[[dict[str, Any], "Peer"], Awaitable[Any]]

#: Writes the socket answers straight from the commit (Dispatcher.submit_write): no task each.
WRITE_METHODS = frozenset({"memory.write", "memory.write_many"})


@dataclass(frozen=True)
class Peer:
    """The connected process, from the socket's peer credentials."""

    pid: int | None
    uid: int | None

    @property
    def actor(self) -> str:
        return f"peer:uid={self.uid},pid={self.pid}"


def _settle(future: Future[Any], fn: Callable[..., Any], *args: Any) -> None:
    """Run ``fn`` into ``future`` (as an executor's work item does), unless it was cancelled
    first: a search's vector leg, made before it is submitted so the lexical leg can be
    handed it and submitted first."""
    if not future.set_running_or_notify_cancel():
        return
    try:
        future.set_result(fn(*args))
    except BaseException as exc:
        future.set_exception(exc)


class Dispatcher:
    """Routes requests to handlers; reads run on a thread pool, writes go to group commit."""

    def __init__(self, cfg: Config, engine: Engine, committer: GroupCommitter,
                 status: Callable[[], dict[str, Any]], embedder: EmbedderAPI,
                 metrics: Callable[[str], dict[str, Any]] | None = None):
        self.cfg = cfg
        self.engine = engine
        self.committer = committer
        self.status_provider = status
        self.embedder = embedder
        #: metrics.series' answer for a window (daemon/metrics.py); None: no history kept.
        self.metrics_provider = metrics
        #: Searches answered since start (a cumulative counter metrics.series turns into a rate).
        self.searches = 0
        self.readers = ThreadPoolExecutor(cfg.read_threads, thread_name_prefix="memoryd-read")
        #: The optional reranker (search_reranker; None when off), run from the read threads.
        self.rerank = stage_for(cfg.search_reranker, cfg.search_rerank_budget_ms,
                                cfg.search_rerank_candidates)
        #: Query embeddings and vector legs, started as a search begins, awaited after its lexical leg.
        self.vector_side = ThreadPoolExecutor(cfg.read_threads, thread_name_prefix="memoryd-vector")
        self.agent_methods: dict[str, Handler] = {
            "memory.write": self.memory_write,
            "memory.write_many": self.memory_write_many,
            "memory.get": self.memory_get,
            "memory.search": self.memory_search,
            "memory.supersede": self.memory_supersede,
            "memory.forget": self.memory_forget,
            "memory.list": self.memory_list,
            "daemon.ping": self.ping,
            "daemon.status": self.status,
        }
        self.admin_methods: dict[str, Handler] = {
            **self.agent_methods,
            "memory.forget": self.memory_forget_operator,
            "queue.list": self.queue_list,
            "queue.retry": self.queue_retry,
            "review.list": self.review_list,
            "review.decide": self.review_decide,
            "review.get": self.review_get,
            "metrics.series": self.metrics_series,
            "audit.verify": self.audit_verify,
            "memory.export": self.memory_export,
            "project.adopt": self.project_adopt,
        }

    def table(self, admin: bool) -> dict[str, Handler]:
        return self.admin_methods if admin else self.agent_methods

    async def dispatch(self, method: str, params: dict[str, Any], peer: Peer, admin: bool) -> Any:
        handler = self.table(admin).get(method)
        if handler is None:
            raise MethodNotFound(f"method {method!r} does not exist on this socket")
        validation.refuse_nul(params)
        return await handler(params, peer)

    async def _read(self, fn: Callable[..., Any], *args: Any) -> Any:
        try:
            return await asyncio.get_running_loop().run_in_executor(self.readers, fn, *args)
        except OperationalError as exc:
            # Locked or cancelled past the store's timeouts (busy_timeout_ms, PostgreSQL's
            # lock_timeout / statement_timeout): 1003 with the cause, as a write answers.
            # Anything else (a missing table) is a crash, reported by the server as one.
            if not is_store_condition(exc):
                raise
            raise store_error(exc) from exc

    # -- memory.* -------------------------------------------------------------
    def _write_unit(self, method: str, params: dict[str, Any], peer: Peer, admin: bool = False
                    ) -> tuple[WriteUnit, Callable[[Any], Any]]:
        """The unit a write method queues, and how its committed outcome becomes the answer.
        ``admin``: the request came in on the operator socket (an item may carry ``restore``)."""
        if method == "memory.write":
            item = validation.parse_write(params, self.cfg, admin=admin)
            return WriteUnit([item], peer.actor), lambda results: results[0]
        items = validation.parse_write_many(params, self.cfg, admin=admin)
        return WriteUnit(items, peer.actor), lambda results: {"results": results}

    def submit_write(self, method: str, params: dict[str, Any], peer: Peer,
                     answer: Callable[[Any], None], admin: bool = False) -> None:
        """The socket's fast path for WRITE_METHODS: validate and queue now, and call
        ``answer`` (with the result, or the MemorydError) on the loop after the commit.
        Bad input or a full queue raises at once and queues nothing."""
        validation.refuse_nul(params)  # what dispatch() checks for every other path
        unit, shape = self._write_unit(method, params, peer, admin)
        self.committer.submit_callback(
            unit, lambda outcome: answer(outcome if isinstance(outcome, MemorydError) else shape(outcome)))

    async def memory_write(self, params: dict[str, Any], peer: Peer) -> Any:
        unit, shape = self._write_unit("memory.write", params, peer)
        return shape(await self.committer.submit(unit))

    async def memory_write_many(self, params: dict[str, Any], peer: Peer) -> Any:
        unit, shape = self._write_unit("memory.write_many", params, peer)
        return shape(await self.committer.submit(unit))

    async def memory_get(self, params: dict[str, Any], peer: Peer) -> Any:
        memory_id, include = validation.parse_get(params)
        if not is_memory_id(memory_id):
            raise NotFound(f"no memory with id {memory_id!r} (ids look like mem_01J…)",
                           data={"field": "id"})
        result = await self._read(self._get_sync, memory_id, include)
        if result.get("status") not in (None, "forgotten", "deleting"):
            self.committer.note_access([memory_id])
        return result

    def _get_sync(self, memory_id: str, include: list[str]) -> dict[str, Any]:
        with read_only(self.engine) as conn:
            row = mem.get_row(conn, memory_id)
            if row is None:
                raise NotFound(f"no memory with id {memory_id!r}", data={"field": "id"})
            out = mem.to_public(row)
            if out.get("status") == "forgotten":
                return out
            out["pending"] = jobq.pending_for(conn, memory_id)
            if "history" in include:
                out["history"] = audit.events_for(conn, memory_id)
            if "citations" in include:
                out["citations"] = links.targets(conn, memory_id, links.CITES)
            if "links" in include:
                out["links"] = links.all_for(conn, memory_id)
            if "entities" in include:
                out["entities"] = entities.for_memory(conn, memory_id)
            return out

    async def memory_search(self, params: dict[str, Any], peer: Peer) -> Any:
        req = validation.parse_search(params, self.cfg)
        now = utcnow()
        # A hybrid search's vector leg (the query's embedding, then the KNN) runs on its own
        # thread and connection, beside the lexical leg's (SQLite releases the GIL as it
        # searches). The lexical thread is woken first: the answer waits on it, and its
        # full-text query releases the GIL sooner than the vector leg's set-up does.
        ahead: Future[search.VectorLeg] | None = Future() if req.mode == "hybrid" else None
        lexical = asyncio.get_running_loop().run_in_executor(
            self.readers, self._search_sync, req, now, ahead)
        if ahead is not None:
            self.vector_side.submit(_settle, ahead, self._vector_leg, req, now)
        try:
            result = await lexical
        except OperationalError as exc:  # as _read answers it
            if not is_store_condition(exc):
                raise
            raise store_error(exc) from exc
        self.committer.note_access([r["id"] for r in result["results"]])
        self.searches += 1
        return result

    def _search_sync(self, req: search.SearchRequest, now: datetime,
                     ahead: Future[search.VectorLeg] | None = None) -> dict[str, Any]:
        notices: list[str] = []
        missing = missing_key_notice(req.reader, req.scope)
        if missing:
            notices.append(missing)
        query_vec: search.VectorSource = None
        if req.mode != "lexical":

            def query_vec() -> search.VectorLeg:
                # A leg no thread has picked up yet (the other core was busy), and a
                # vector-only search's, runs here: waiting for a thread to wake costs more.
                if ahead is not None and not ahead.cancel():
                    return ahead.result()
                return self._vector_leg(req, now)

        def reason() -> str:
            return self.embedder.query_unavailable_reason() or "the embedder is not ready"

        rerank = self.rerank
        with read_only(self.engine) as conn:
            outcome = search.run(conn, req, now, query_vec, reason,
                                 lazy_vec=lambda: self.embedder.encode_query(req.query),
                                 rerank_candidates=rerank.candidates if rerank else 0,
                                 learned_ranking=self.cfg.search_learned_ranking)
        if rerank is not None and outcome.candidates is not None:
            # After the snapshot closes: the reranker holds no read transaction open.
            ranked, more = rerank(req.query, outcome.candidates, req.explain)
            outcome.results, outcome.notices = ranked[:req.k], outcome.notices + more
        results = []
        for row in outcome.results:
            public = mem.to_public(row)
            public["score"] = round(float(row["score"]), 6)
            if "explain" in row:
                public["explain"] = row["explain"]
            results.append(public)
        return {"results": results, "mode_used": outcome.mode_used,
                "notices": notices + outcome.notices}

    async def memory_list(self, params: dict[str, Any], peer: Peer) -> Any:
        req = validation.parse_list(params, self.cfg)
        notice = missing_key_notice(req.reader, req.scope)

        def run() -> Any:
            with read_only(self.engine) as conn:
                try:
                    page = listing.list_memories(conn, req, to_rfc3339(utcnow()))
                except listing.BadCursor as exc:
                    raise validation.cursor_error(exc) from exc
            page["notices"] = [notice] if notice else []
            return page

        return await self._read(run)

    async def memory_export(self, params: dict[str, Any], peer: Peer) -> Any:
        req = validation.parse_export(params, self.cfg)

        def run() -> Any:
            with read_only(self.engine) as conn:
                try:
                    return listing.export_page(conn, req)
                except listing.BadCursor as exc:
                    raise validation.cursor_error(exc) from exc

        return await self._read(run)

    def _vector_leg(self, req: search.SearchRequest, now: datetime) -> search.VectorLeg:
        vec = self.embedder.encode_query(req.query)
        if vec is None:
            return search.VectorLeg(None)
        with read_only(self.engine) as conn:
            return search.vector_leg(conn, req, now, vec)

    async def memory_supersede(self, params: dict[str, Any], peer: Peer) -> Any:
        old_id, new_id, reader, reason, write_params = validation.parse_supersede(params)
        cfg = self.cfg

        def op(conn: Connection, now: datetime, ctx: WriteContext) -> Any:
            new = None
            if new_id is None:
                old = lifecycle.get_row(conn, old_id) if is_memory_id(old_id) else None
                if old is None:
                    raise NotFound(f"no memory with id {old_id!r}", data={"field": "old_id"})
                inherited: dict[str, Any] = {"scope": old.scope, "kind": old.kind}
                inherited.update({f: getattr(old, f) for f in OWNER_FIELDS if getattr(old, f)})
                new = validation.parse_write({**inherited, **write_params}, cfg)
            req = lifecycle.SupersedeRequest(old_id=old_id, new_id=new_id, new=new, reader=reader,
                                             reason=reason)
            return lifecycle.supersede(conn, req, now, ctx)

        return await self.committer.submit(WriteUnit([], peer.actor, op=op, wakes_runner=True))

    async def memory_forget(self, params: dict[str, Any], peer: Peer) -> Any:
        """memory.forget on the agent socket: by id only (by subject is an operator verb)."""
        memory_id, subject, reason, tombstone = validation.parse_forget(params)
        if subject is not None:
            raise Forbidden("forget by subject is an operator verb, served on the operator socket "
                            "only; run `memoryd forget --subject FIELD=VALUE` as the daemon's user",
                            data={"field": "subject"})
        return await self._forget_batch(memory_id, None, reason, tombstone, peer.actor, 0, None)

    async def memory_forget_operator(self, params: dict[str, Any], peer: Peer) -> Any:
        """memory.forget on the operator socket: by id, or by subject in bounded batches.

        Each batch of at most ``limit`` rows (500 when not given) is its own
        short transaction through the group committer, so client writes go
        between batches instead of waiting behind one unbounded transaction.
        With ``limit`` the call does one batch and answers ``next_cursor``
        (null when done) and ``remaining``; without it, it runs every batch.
        """
        memory_id, subject, reason, tombstone = validation.parse_forget(params)
        actor = f"operator:{peer.actor}"
        if subject is None:
            return await self._forget_batch(memory_id, None, reason, tombstone, actor, 0, None)
        limit, after_seq = validation.parse_forget_page(params)
        request_ids: list[str] = []
        matched = 0
        while True:
            page = await self._forget_batch(None, subject, reason, tombstone, actor, after_seq,
                                            limit or lifecycle.SUBJECT_BATCH)
            matched += page["matched"]
            if page["matched"]:
                request_ids.append(page["request_id"])
            if page["next_seq"] is None or limit is not None:
                break
            after_seq = page["next_seq"]
        result: dict[str, Any] = {
            "request_id": request_ids[0] if request_ids else page["request_id"],
            "request_ids": request_ids, "matched": matched,
        }
        if limit is not None:
            result["next_cursor"] = None if page["next_seq"] is None else f"s{page['next_seq']}"
            result["remaining"] = await self._read(self._count_subject, subject, page["next_seq"])
        return result

    def _count_subject(self, subject: dict[str, str], after_seq: int | None) -> int:
        if after_seq is None:
            return 0
        with read_only(self.engine) as conn:
            return lifecycle.count_subject(conn, subject, after_seq)

    async def _forget_batch(self, memory_id: str | None, subject: dict[str, str] | None,
                            reason: str | None, tombstone: bool, actor: str, after_seq: int,
                            limit: int | None) -> dict[str, Any]:
        max_attempts = self.cfg.job_max_attempts

        def op(conn: Connection, now: datetime, ctx: WriteContext) -> Any:
            return lifecycle.forget(conn, memory_id=memory_id, subject=subject, reason=reason,
                                    tombstone=tombstone, now=now, actor=ctx.actor,
                                    max_attempts=max_attempts, after_seq=after_seq, limit=limit)

        out = await self.committer.submit(WriteUnit([], actor, op=op, wakes_runner=True))
        if memory_id is not None:
            return {"request_id": out["request_id"], "matched": out["matched"]}
        return dict(out)

    # -- review.* and audit (operator socket) -----------------------------------
    async def review_list(self, params: dict[str, Any], peer: Peer) -> Any:
        validation.check_known(params, {"status", "limit"})
        status = validation._enum(params, "status", proposals.STATUSES, "open")
        limit = validation.int_param(params, "limit", 50, 1, 1000)

        def run() -> Any:
            with read_only(self.engine) as conn:
                return {"proposals": proposals.list_(conn, status or "open", limit)}

        return await self._read(run)

    async def review_get(self, params: dict[str, Any], peer: Peer) -> Any:
        """One proposal by id (any status), with the memories it names as memory.get shows
        them (null for an id that no longer exists)."""
        validation.check_known(params, {"id"})
        proposal_id = validation.opt_str(params, "id", 64)
        if proposal_id is None:
            raise InvalidParams("id", "is required")

        def run() -> Any:
            with read_only(self.engine) as conn:
                row = proposals.get(conn, proposal_id)
                if row is None:
                    raise NotFound(f"no proposal with id {proposal_id!r}; see `memoryd review list`",
                                   data={"field": "id"})
                found = proposals.to_public(row)
                named = list(found["memory_ids"])
                # A supersede proposal's payload names its old and new rows; list them too.
                for key in ("old_id", "new_id"):
                    value = (found["payload"] or {}).get(key)
                    if isinstance(value, str) and value not in named:
                        named.append(value)
                rows = {mid: mem.get_row(conn, mid) if is_memory_id(mid) else None for mid in named}
            return {"proposal": found,
                    "memories": {mid: None if r is None else mem.to_public(r) for mid, r in rows.items()}}

        return await self._read(run)

    async def review_decide(self, params: dict[str, Any], peer: Peer) -> Any:
        validation.check_known(params, {"id", "decision", "note"})
        proposal_id = validation.opt_str(params, "id", 64)
        if proposal_id is None:
            raise InvalidParams("id", "is required")
        decision = validation._enum(params, "decision", ("approve", "reject"), None)
        if decision is None:
            raise InvalidParams("decision", "is required: 'approve' or 'reject'")
        note = validation.opt_str(params, "note", 2000)

        def op(conn: Connection, now: datetime, ctx: WriteContext) -> Any:
            return review.decide(conn, proposal_id, decision, note, now, ctx)

        return await self.committer.submit(WriteUnit([], f"operator:{peer.actor}", op=op))

    async def audit_verify(self, params: dict[str, Any], peer: Peer) -> Any:
        # expect_heads: a previous answer's "heads" kept outside the database (store/audit.py).
        # Other parameters are ignored, as before it took any (docs/protocol.md).
        expect = audit.parse_heads(params.get("expect_heads"))

        def run() -> Any:
            with read_only(self.engine) as conn:
                return audit.check(conn, expect).as_dict()

        return await self._read(run)

    # -- project.adopt (operator socket) --------------------------------------------
    async def project_adopt(self, params: dict[str, Any], peer: Peer) -> Any:
        """Move project ``from``'s rows to project ``to`` (store/projects.py), in batches of
        at most ``limit`` memories, each its own short transaction through the group committer."""
        validation.check_known(params, {"from", "to", "limit"})
        old, new = validation.opt_str(params, "from"), validation.opt_str(params, "to")
        if not old or not old.strip():
            raise InvalidParams("from", "is required: the project value the rows carry now")
        if not new or not new.strip():
            raise InvalidParams("to", "is required: the project key to move them to")
        if old == new:
            raise InvalidParams("to", "is the same as 'from'; nothing to adopt")
        limit = validation.int_param(params, "limit", projects.ADOPT_BATCH, 1, 10_000)
        actor = f"operator:{peer.actor}"
        totals = {"memories": 0, "tombstones": 0, "idempotency_keys": 0, "entities": 0, "batches": 0}

        def op(conn: Connection, now: datetime, ctx: WriteContext) -> Any:
            return projects.adopt_batch(conn, old=old, new=new, at=to_rfc3339(now), actor=ctx.actor,
                                        limit=limit)

        while True:
            out = await self.committer.submit(WriteUnit([], actor, op=op))
            totals["batches"] += 1
            for key in ("memories", "tombstones", "idempotency_keys", "entities"):
                totals[key] += out[key]
            if out["done"]:
                break
        return {"from": old, "to": new, **totals}

    # -- metrics.series (operator socket) ---------------------------------------------
    async def metrics_series(self, params: dict[str, Any], peer: Peer) -> Any:
        """The daemon's recent history: ``window`` hour (fine points) or day (coarse points)."""
        validation.check_known(params, {"window"})
        window = validation._enum(params, "window", ("hour", "day"), "hour") or "hour"
        if self.metrics_provider is None:
            return {"window": window, "interval_s": None, "capacity": 0, "points": []}
        return self.metrics_provider(window)

    # -- daemon.* ---------------------------------------------------------------
    async def ping(self, params: dict[str, Any], peer: Peer) -> Any:
        return {"version": __version__, "protocol": PROTOCOL_VERSION, "pid": os.getpid()}

    async def status(self, params: dict[str, Any], peer: Peer) -> Any:
        return await self._read(self.status_provider)

    # -- queue.* (operator socket) -------------------------------------------------
    async def queue_list(self, params: dict[str, Any], peer: Peer) -> Any:
        state = validation._enum(params, "state", ("ready", "failed", "leased", "done", "dead"), None)
        pass_name = validation.opt_str(params, "pass", 32)
        limit = params.get("limit", 100)
        if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= 10000:
            raise InvalidParams("limit", "must be an integer from 1 to 10000")

        def run() -> Any:
            with read_only(self.engine) as conn:
                return {"jobs": jobq.list_jobs(conn, state=state, pass_name=pass_name, limit=limit)}

        return await self._read(run)

    async def queue_retry(self, params: dict[str, Any], peer: Peer) -> Any:
        ids = validation.job_ids(params)
        pass_name = validation.opt_str(params, "pass", 32)
        if not ids and not pass_name and params.get("all") is not True:
            raise InvalidParams("ids", "name job ids, a pass, or set all=true")

        def run() -> Any:
            with self.engine.begin() as conn:
                return jobq.retry_dead(conn, now=utcnow().timestamp(), job_ids=ids, pass_name=pass_name)

        revived = await self._read(run)
        if revived:
            self.committer.on_commit()  # wake the runner
        return {"revived": revived}

    def close(self) -> None:
        self.readers.shutdown(wait=False, cancel_futures=True)
        if self.rerank is not None:
            self.rerank.close()
        self.vector_side.shutdown(wait=False, cancel_futures=True)
