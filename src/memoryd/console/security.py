"""The console's guards: one ASGI middleware in front of every route and static file.

In order, for each HTTP request:

1. **Host.** The Host header must be the address and port the console
   listens on (``127.0.0.1:PORT``). A page on another site that rebinds its
   own name to 127.0.0.1 sends its own name as Host and is refused 403.
2. **Token.** The printed URL carries ``?token=...``; a request with the right
   token gets an HttpOnly, SameSite=Strict session cookie and a 303 to the
   same URL without the token (so the token leaves the address bar and never
   reaches a Referer or the history of a later page). A request with neither
   the cookie nor the token is refused 401.
3. **State changes.** A method other than GET/HEAD must carry
   ``Origin: http://127.0.0.1:PORT`` and the CSRF token (the form field
   ``csrf`` or the ``X-CSRF-Token`` header); otherwise 403.

Every response, refusals included, carries the Content-Security-Policy and the
other headers in :data:`SECURITY_HEADERS`.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from collections.abc import Awaitable, Callable, MutableMapping
from dataclasses import dataclass, field
from http.cookies import SimpleCookie
from typing import Any
from urllib.parse import parse_qs, parse_qsl, urlencode

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

#: Nothing but the console's own origin, no inline script or style, no frames, no plugins.
CSP = ("default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self'; font-src 'self'; "
       "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'; "
       "object-src 'none'")
SECURITY_HEADERS: tuple[tuple[bytes, bytes], ...] = (
    (b"content-security-policy", CSP.encode()),
    (b"x-content-type-options", b"nosniff"),
    (b"x-frame-options", b"DENY"),
    # same-origin, not no-referrer: under no-referrer a browser sends "Origin: null" with a form
    # POST, and the Origin check could not tell the console's own page from a sandboxed frame.
    (b"referrer-policy", b"same-origin"),
    (b"cache-control", b"no-store"),
    (b"cross-origin-opener-policy", b"same-origin"),
    (b"cross-origin-resource-policy", b"same-origin"),
)
SAFE_METHODS = frozenset({"GET", "HEAD"})
#: A state-changing form is a few fields; anything larger is refused before it is read whole.
MAX_FORM_BYTES = 256 * 1024


@dataclass(frozen=True)
class Secrets:
    """The URL token, the session cookie's value and the CSRF token of one console process."""

    token: str = field(default_factory=lambda: secrets.token_urlsafe(24))
    session: str = field(default_factory=lambda: secrets.token_urlsafe(32))

    @property
    def csrf(self) -> str:
        """The form token: derived from the session, so it is unknown to anyone without it."""
        return hmac.new(self.session.encode(), b"memoryd-console-csrf", hashlib.sha256).hexdigest()


def _header(scope: Scope, name: bytes) -> str | None:
    for key, value in scope.get("headers", ()):
        if key == name:
            return str(value.decode("latin-1"))
    return None


def _same(given: str | None, expected: str) -> bool:
    return given is not None and hmac.compare_digest(given.encode(), expected.encode())


class ConsoleGuard:
    """The middleware: Host, token/cookie and Origin + CSRF checks, and the security headers."""

    def __init__(self, app: ASGIApp, *, secrets_: Secrets, host: str, port: int):
        self.app = app
        self.secrets = secrets_
        self.netloc = f"{host}:{port}"
        self.origin = f"http://{self.netloc}"
        # Cookies are not scoped by port: two consoles on one machine must not share a name.
        self.cookie_name = f"memoryd_console_{port}"

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_secured(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = [(k, v) for k, v in message.get("headers", [])
                           if k.lower() not in {h for h, _ in SECURITY_HEADERS}]
                message["headers"] = headers + list(SECURITY_HEADERS)
            await send(message)

        if _header(scope, b"host") != self.netloc:
            await _plain(send_secured, 403, "Forbidden: this console answers only at "
                         f"{self.origin} (the Host header names another site)")
            return
        query = scope.get("query_string", b"").decode("latin-1")
        given_token = parse_qs(query).get("token", [None])[0]
        if given_token is not None:
            if not _same(given_token, self.secrets.token):
                await _plain(send_secured, 401, "Unauthorized: that token is not this console's; "
                             "open the URL `memoryd console` printed")
                return
            await self._exchange(scope, query, send_secured)
            return
        if not _same(self._cookie(scope), self.secrets.session):
            await _plain(send_secured, 401, "Unauthorized: open the URL `memoryd console` printed "
                         "(it carries the token); this browser has no session for this console")
            return
        scope.setdefault("state", {})["csrf"] = self.secrets.csrf
        if scope["method"] in SAFE_METHODS:
            await self.app(scope, receive, send_secured)
            return
        if _header(scope, b"origin") != self.origin:
            await _plain(send_secured, 403, "Forbidden: a change must come from the console's own page "
                         f"(Origin {self.origin})")
            return
        body, complete = await _read_body(receive)
        if not complete:
            await _plain(send_secured, 413, "Request too large")
            return
        form_token = _header(scope, b"x-csrf-token")
        if form_token is None and (_header(scope, b"content-type") or "").startswith(
                "application/x-www-form-urlencoded"):
            form_token = parse_qs(body.decode("utf-8", "replace")).get("csrf", [None])[0]
        if not _same(form_token, self.secrets.csrf):
            await _plain(send_secured, 403, "Forbidden: the form's CSRF token is missing or stale; "
                         "reload the page and try again")
            return
        await self.app(scope, _replay(body, receive), send_secured)

    def _cookie(self, scope: Scope) -> str | None:
        raw = _header(scope, b"cookie")
        if not raw:
            return None
        jar: SimpleCookie = SimpleCookie()
        try:
            jar.load(raw)
        except Exception:  # a malformed Cookie header is no session
            return None
        morsel = jar.get(self.cookie_name)
        return morsel.value if morsel is not None else None

    async def _exchange(self, scope: Scope, query: str, send: Send) -> None:
        """The token is right: set the session cookie and send the browser to the URL without it."""
        rest = urlencode([(k, v) for k, v in parse_qsl(query, keep_blank_values=True) if k != "token"])
        location = scope.get("path", "/") + (f"?{rest}" if rest else "")
        cookie = (f"{self.cookie_name}={self.secrets.session}; Path=/; HttpOnly; SameSite=Strict")
        await send({"type": "http.response.start", "status": 303,
                    "headers": [(b"location", location.encode("latin-1", "replace")),
                                (b"set-cookie", cookie.encode()),
                                (b"content-type", b"text/plain; charset=utf-8")]})
        await send({"type": "http.response.body", "body": b"See the console without the token in the URL\n"})


async def _plain(send: Send, status: int, text: str) -> None:
    body = (text + "\n").encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"text/plain; charset=utf-8"),
                            (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})


async def _read_body(receive: Receive) -> tuple[bytes, bool]:
    """The request body, and False when it passed MAX_FORM_BYTES (then it is not read further)."""
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return b"".join(chunks), True
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > MAX_FORM_BYTES:
            return b"", False
        chunks.append(chunk)
        if not message.get("more_body", False):
            return b"".join(chunks), True


def _replay(body: bytes, upstream: Receive) -> Receive:
    """A receive() that hands the route the body this guard has already read, then waits on
    the server's own (for the disconnect)."""
    sent = False

    async def receive() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await upstream()

    return receive
