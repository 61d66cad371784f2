"""The console's pages: each one a few calls on the operator socket, rendered by a template.

GET pages only read. Every change (supersede, forget, review decisions, job
retries, and running the audit check) is a POST from a form that carries the
CSRF token; security.py has checked Origin and token before a handler runs.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any
from urllib.parse import parse_qs, urlencode

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import Route

from memoryd.console import charts
from memoryd.console.gateway import DaemonProblem, Gateway

OWNER_FIELDS = ("agent_id", "user_id", "project", "session_id")
SCOPES = ("agent", "user", "project", "session", "org")
MODES = ("hybrid", "lexical", "vector")
STATUSES = ("active", "candidate", "superseded", "rejected", "archived", "deleting", "forgotten")
PROPOSAL_STATUSES = ("open", "approved", "rejected", "stale", "withdrawn")
#: What a forget erases, said on its confirmation page (PROTOCOL.md's memory.forget and clarifications).
FORGET_ERASES = (
    "the memory's text, its vector and its entries in the search indexes",
    "copies collapsed into it as duplicates, and derived memories that cite only it",
    "its links, and the text of review proposals that quote it (open ones are withdrawn)",
    "error strings of jobs that quoted it",
)
FORGET_KEEPS = ("the audit events about it, which keep ids and hashes, never text",
                "a tombstone (unless you untick it), so the same text written again in the same "
                "scope and owner is refused")


def gateway(request: Request) -> Gateway:
    gw: Gateway = request.app.state.gateway
    return gw


def render(request: Request, name: str, context: dict[str, Any], status: int = 200) -> Response:
    """A page from templates/, with the CSRF token and the current section."""
    templates = request.app.state.templates
    ctx = {"csrf": request.scope.get("state", {}).get("csrf", ""), "section": name.split(".")[0], **context}
    response: Response = templates.TemplateResponse(request, name, ctx, status_code=status)
    return response


def problem_page(request: Request, exc: DaemonProblem) -> Response:
    return render(request, "error.html", {"message": exc.message, "status": exc.status}, exc.status)


async def read_form(request: Request) -> dict[str, list[str]]:
    """The posted form (application/x-www-form-urlencoded), every value of every field."""
    body = await request.body()
    return parse_qs(body.decode("utf-8", "replace"), keep_blank_values=True)


def first(form: Mapping[str, list[str]], name: str, default: str = "") -> str:
    values = form.get(name)
    return values[0].strip() if values else default


def pick(params: Mapping[str, str], names: tuple[str, ...]) -> dict[str, str]:
    return {n: params[n].strip() for n in names if params.get(n, "").strip()}


# -- overview ----------------------------------------------------------------------------

async def overview(request: Request) -> Response:
    window = request.query_params.get("window", "hour")
    window = window if window in ("hour", "day") else "hour"
    try:
        status, series = await gateway(request).gather(("daemon.status", {}),
                                                       ("metrics.series", {"window": window}))
    except DaemonProblem as exc:
        return problem_page(request, exc)
    drawn = [(c, charts.render(c)) for c in charts.charts_from_points(series["points"])]
    return render(request, "overview.html", {"status": status, "series": series, "charts": drawn,
                                             "window": window})


# -- memories ----------------------------------------------------------------------------

async def memories(request: Request) -> Response:
    """Search (with a query) or list (without), with the filters the form sends."""
    q = request.query_params
    owners = pick(q, OWNER_FIELDS)
    narrow = {k: v for k, v in (("scope", q.get("scope", "")), ("kind", q.get("kind", "").strip())) if v}
    form: dict[str, Any] = {**owners, **narrow, **{k: q.get(k, "") for k in (
        "q", "mode", "k", "as_of", "valid_at", "include_candidates", "recorded_after", "recorded_before",
        "cursor")}, "status": q.getlist("status")}
    gw = gateway(request)
    try:
        if form["q"].strip():
            params: dict[str, Any] = {"query": form["q"].strip(), **owners, **narrow,
                                      "mode": form["mode"] if form["mode"] in MODES else "hybrid",
                                      "k": _int(form["k"], 20, 1, 100)}
            params.update(pick(q, ("as_of", "valid_at")))
            if form["include_candidates"]:
                params["include_candidates"] = True
            result = await gw.call("memory.search", params)
            return render(request, "memories.html", {"form": form, "searched": True, "result": result,
                                                     "rows": result["results"], "next_url": None})
        params = {**owners, **narrow, "limit": 50, "status": form["status"] or ["active"]}
        params.update(pick(q, ("recorded_after", "recorded_before", "cursor")))
        result = await gw.call("memory.list", params)
    except DaemonProblem as exc:
        return render(request, "memories.html", {"form": form, "searched": bool(form["q"].strip()),
                                                 "result": None, "rows": [], "error": exc.message,
                                                 "next_url": None}, exc.status)
    next_url = None
    if result.get("next_cursor"):
        keep = [(k, v) for k, v in q.multi_items() if k != "cursor"]
        next_url = "/memories?" + urlencode([*keep, ("cursor", result["next_cursor"])])
    return render(request, "memories.html", {"form": form, "searched": False, "result": result,
                                             "rows": result["memories"], "next_url": next_url})


def _int(text: str, default: int, low: int, high: int) -> int:
    try:
        return max(low, min(high, int(text)))
    except ValueError:
        return default


async def memory_page(request: Request) -> Response:
    memory_id = request.path_params["memory_id"]
    try:
        memory = await gateway(request).call(
            "memory.get", {"id": memory_id, "include": ["history", "citations", "links", "entities"]})
    except DaemonProblem as exc:
        return problem_page(request, exc)
    return render(request, "memory.html", {"m": memory, "owner_fields": OWNER_FIELDS})


def _owner_key(memory: Mapping[str, Any]) -> dict[str, str]:
    """The row's own owner fields: the operator supersedes as the row's owner."""
    return {f: memory[f] for f in OWNER_FIELDS if memory.get(f)}


async def memory_supersede(request: Request) -> Response:
    memory_id = request.path_params["memory_id"]
    form = await read_form(request)
    content = first(form, "content")
    gw = gateway(request)
    try:
        if not content:
            raise DaemonProblem(400, "The new text is empty; write the corrected memory and save again.")
        old = await gw.call("memory.get", {"id": memory_id})
        params: dict[str, Any] = {"old_id": memory_id, "content": content, **_owner_key(old)}
        if first(form, "reason"):
            params["reason"] = first(form, "reason")
        result = await gw.call("memory.supersede", params)
    except DaemonProblem as exc:
        return problem_page(request, exc)
    return RedirectResponse(f"/memories/{result['new_id']}", status_code=303)


async def forget_confirm(request: Request) -> Response:
    memory_id = request.path_params["memory_id"]
    try:
        memory = await gateway(request).call("memory.get", {"id": memory_id})
    except DaemonProblem as exc:
        return problem_page(request, exc)
    return render(request, "forget.html", {"m": memory, "erases": FORGET_ERASES, "keeps": FORGET_KEEPS})


async def memory_forget(request: Request) -> Response:
    memory_id = request.path_params["memory_id"]
    form = await read_form(request)
    params: dict[str, Any] = {"id": memory_id, "tombstone": first(form, "tombstone") == "on"}
    if first(form, "reason"):
        params["reason"] = first(form, "reason")
    try:
        await gateway(request).call("memory.forget", params)
    except DaemonProblem as exc:
        return problem_page(request, exc)
    return RedirectResponse(f"/memories/{memory_id}", status_code=303)


# -- review ------------------------------------------------------------------------------

async def review(request: Request, outcomes: list[dict[str, Any]] | None = None) -> Response:
    status = request.query_params.get("status", "open")
    status = status if status in PROPOSAL_STATUSES else "open"
    gw = gateway(request)
    try:
        listed = await gw.call("review.list", {"status": status, "limit": 100})
        shown = await gw.gather(*(("review.get", {"id": p["id"]}) for p in listed["proposals"]))
    except DaemonProblem as exc:
        return problem_page(request, exc)
    return render(request, "review.html", {"items": shown, "status": status, "outcomes": outcomes or [],
                                           "statuses": PROPOSAL_STATUSES})


async def proposal_page(request: Request) -> Response:
    try:
        item = await gateway(request).call("review.get", {"id": request.path_params["proposal_id"]})
    except DaemonProblem as exc:
        return problem_page(request, exc)
    return render(request, "proposal.html", {"item": item})


async def review_decide(request: Request) -> Response:
    """Approve or reject the ticked proposals (one or several), each with the note."""
    form = await read_form(request)
    decision = first(form, "decision")
    ids = [i for i in form.get("ids", []) if i.strip()]
    if decision not in ("approve", "reject") or not ids:
        return problem_page(request, DaemonProblem(400, "Tick at least one proposal and press Approve "
                                                        "or Reject."))
    note = first(form, "note")
    gw = gateway(request)

    async def one(pid: str) -> dict[str, Any]:
        params = {"id": pid, "decision": decision, **({"note": note} if note else {})}
        try:
            return {"id": pid, "ok": True, "result": await gw.call("review.decide", params)}
        except DaemonProblem as exc:
            return {"id": pid, "ok": False, "error": exc.message}

    # One after another: decisions on proposals that share a memory must not race each other.
    outcomes = [await one(pid) for pid in ids]
    return await review(request, outcomes)


# -- jobs --------------------------------------------------------------------------------

async def jobs(request: Request, revived: int | None = None) -> Response:
    try:
        dead, failed, status = await gateway(request).gather(
            ("queue.list", {"state": "dead", "limit": 200}),
            ("queue.list", {"state": "failed", "limit": 200}),
            ("daemon.status", {}))
    except DaemonProblem as exc:
        return problem_page(request, exc)
    failing = {n: p for n, p in status["passes"].items()
               if p.get("state") == "failing" or p.get("last_error")}
    return render(request, "jobs.html", {"dead": dead["jobs"], "failed": failed["jobs"], "failing": failing,
                                         "revived": revived})


async def jobs_retry(request: Request) -> Response:
    form = await read_form(request)
    params: dict[str, Any]
    if first(form, "all") == "1":
        params = {"all": True}
    else:
        ids = [int(i) for i in form.get("ids", []) if i.strip().isdigit()]
        if not ids:
            return problem_page(request, DaemonProblem(
                400, "Tick at least one dead job, or press Retry every dead job."))
        params = {"ids": ids}
    try:
        result = await gateway(request).call("queue.retry", params)
    except DaemonProblem as exc:
        return problem_page(request, exc)
    return await jobs(request, revived=int(result["revived"]))


# -- audit -------------------------------------------------------------------------------

async def audit(request: Request) -> Response:
    return render(request, "audit.html", {"result": None})


async def audit_verify(request: Request) -> Response:
    try:
        result = await asyncio.shield(gateway(request).call("audit.verify", {}))
    except DaemonProblem as exc:
        return problem_page(request, exc)
    return render(request, "audit.html", {"result": result})


ROUTES = [
    Route("/", overview),
    Route("/memories", memories),
    Route("/memories/{memory_id}", memory_page),
    Route("/memories/{memory_id}/supersede", memory_supersede, methods=["POST"]),
    Route("/memories/{memory_id}/forget", forget_confirm),
    Route("/memories/{memory_id}/forget", memory_forget, methods=["POST"]),
    Route("/review", review),
    Route("/review/decide", review_decide, methods=["POST"]),
    Route("/review/{proposal_id}", proposal_page),
    Route("/jobs", jobs),
    Route("/jobs/retry", jobs_retry, methods=["POST"]),
    Route("/audit", audit),
    Route("/audit/verify", audit_verify, methods=["POST"]),
]
