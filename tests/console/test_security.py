"""The console's guards, each one on its own: Host, token and cookie, Origin and CSRF, the headers.

Most tests drive the ASGI app through Starlette's TestClient (the app's own client
reaches the real daemon's operator socket); one starts ``memoryd console`` and speaks
real HTTP to it; one checks it refuses to start without a daemon.
"""

from __future__ import annotations

import http.client
import json
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("starlette", reason="the console extra (starlette, jinja2, uvicorn) is not installed")

from starlette.testclient import TestClient

from memoryd.client.aio import AsyncClient
from memoryd.console.app import create_app
from memoryd.console.security import CSP, Secrets
from tests.console.conftest import MEMORYD, ConsoleProcess
from tests.integration.harness import DaemonHandle, hermetic_env

PORT = 48765
ORIGIN = f"http://127.0.0.1:{PORT}"
PAGES = ("/", "/memories", "/review", "/jobs", "/audit", "/static/console.css", "/static/console.js")


@pytest.fixture
def secrets_() -> Secrets:
    return Secrets()


@pytest.fixture
def client(console_daemon: DaemonHandle, secrets_: Secrets) -> Iterator[TestClient]:
    """A TestClient on the console app (Host 127.0.0.1:PORT), with no session yet."""
    app = create_app(lambda: AsyncClient(console_daemon.admin_socket), secrets_, port=PORT)
    with TestClient(app, base_url=ORIGIN, follow_redirects=False) as tc:
        yield tc


def login(client: TestClient, secrets_: Secrets) -> None:
    answer = client.get(f"/?token={secrets_.token}")
    assert answer.status_code == 303


def csrf_of(page: str) -> str:
    found = re.search(r'name="csrf" value="([^"]+)"', page)
    assert found, "the page has no CSRF field"
    return found.group(1)


def test_no_token_and_no_cookie_is_401_on_every_page(client: TestClient) -> None:
    for path in PAGES:
        answer = client.get(path)
        assert answer.status_code == 401, path
        assert "memoryd console" in answer.text  # says which URL to open


def test_a_wrong_token_is_401_and_sets_no_cookie(client: TestClient, secrets_: Secrets) -> None:
    answer = client.get("/?token=" + "x" * len(secrets_.token))
    assert answer.status_code == 401 and "set-cookie" not in answer.headers
    assert client.get("/").status_code == 401


def test_the_token_becomes_an_httponly_strict_cookie_and_leaves_the_url(client: TestClient,
                                                                         secrets_: Secrets) -> None:
    answer = client.get(f"/memories?q=deploy&token={secrets_.token}")
    assert answer.status_code == 303
    assert answer.headers["location"] == "/memories?q=deploy"  # the token gone, the rest kept
    cookie = answer.headers["set-cookie"]
    assert cookie.startswith(f"memoryd_console_{PORT}=") and secrets_.token not in cookie
    assert "HttpOnly" in cookie and "SameSite=Strict" in cookie and "Path=/" in cookie
    page = client.get("/")  # the cookie alone now opens the pages
    assert page.status_code == 200 and "Overview" in page.text


def test_a_foreign_host_header_is_403_even_with_a_session(client: TestClient, secrets_: Secrets) -> None:
    login(client, secrets_)
    assert client.get("/").status_code == 200  # positive control: the right Host
    for host in ("evil.example", f"evil.example:{PORT}", f"localhost:{PORT}", "127.0.0.1", "127.0.0.1:1"):
        answer = client.get("/", headers={"host": host})
        assert answer.status_code == 403, host
        assert answer.headers["content-security-policy"] == CSP
    # Before any session too: a rebinding page cannot even learn that a token is wanted.
    assert client.get(f"/?token={secrets_.token}", headers={"host": "evil.example"}).status_code == 403


def test_a_state_change_needs_the_same_origin_and_the_csrf_token(
        console_daemon: DaemonHandle, client: TestClient, secrets_: Secrets) -> None:
    login(client, secrets_)
    written = console_daemon.write("The nightly backup runs at 02:00", agent_id="sec-a")
    form_page = client.get(f"/memories/{written['id']}/forget").text
    token = csrf_of(form_page)
    url = f"/memories/{written['id']}/forget"
    form = {"csrf": token, "tombstone": "on", "reason": "test"}
    cases: list[tuple[dict[str, str], dict[str, Any]]] = [
        ({}, form),                                          # no Origin
        ({"origin": "http://evil.example"}, form),           # another site's Origin
        ({"origin": f"http://localhost:{PORT}"}, form),     # a name for the same place is not the origin
        ({"origin": "null"}, form),                          # a sandboxed frame
        ({"origin": ORIGIN}, {**form, "csrf": "0" * 64}),    # the right Origin, a forged token
        ({"origin": ORIGIN}, {k: v for k, v in form.items() if k != "csrf"}),  # no token
    ]
    for headers, data in cases:
        answer = client.post(url, headers=headers, data=data)
        assert answer.status_code == 403, (headers, data)
        assert console_daemon.call("memory.get", {"id": written["id"]})["status"] == "active"
    done = client.post(url, headers={"origin": ORIGIN}, data=form)  # positive control
    assert done.status_code == 303 and done.headers["location"] == f"/memories/{written['id']}"
    assert console_daemon.call("memory.get", {"id": written["id"]})["status"] in ("deleting", "forgotten")


def test_a_post_without_a_session_is_401_before_anything_else(client: TestClient) -> None:
    answer = client.post("/audit/verify", headers={"origin": ORIGIN}, data={"csrf": "x"})
    assert answer.status_code == 401


def test_every_response_carries_the_csp_and_the_other_security_headers(client: TestClient,
                                                                        secrets_: Secrets) -> None:
    responses = [client.get("/"), client.get("/", headers={"host": "evil.example"})]
    login(client, secrets_)
    responses += [client.get(path) for path in PAGES]
    responses += [client.get("/no-such-page"), client.get("/memories/mem_nope"),
                  client.post("/audit/verify", headers={"origin": ORIGIN})]
    assert {r.status_code for r in responses} >= {200, 401, 403, 404}
    for r in responses:
        assert r.headers["content-security-policy"] == CSP, r.request.url
        assert r.headers["x-content-type-options"] == "nosniff"
        assert r.headers["referrer-policy"] == "same-origin"
        assert r.headers["x-frame-options"] == "DENY"
    assert "default-src 'self'" in CSP and "script-src 'self'" in CSP and "unsafe-inline" not in CSP


def test_pages_have_no_inline_script_or_style_and_name_nothing_outside(client: TestClient,
                                                                      secrets_: Secrets) -> None:
    login(client, secrets_)
    for path in ("/", "/memories", "/review", "/jobs", "/audit"):
        html = client.get(path).text
        scripts = re.findall(r"<script[^>]*>", html)
        assert scripts == ['<script src="/static/console.js" defer>'], path
        assert " style=" not in html and "<style" not in html
        assert not re.search(r'(src|href|action)="(https?:)?//', html), path


def test_the_real_server_binds_loopback_and_guards_over_http(console_process: ConsoleProcess) -> None:
    url = console_process.url
    assert re.fullmatch(r"http://127\.0\.0\.1:\d+/\?token=[A-Za-z0-9_-]{20,}", url)
    assert console_process.port == int(url.split(":")[2].split("/")[0])
    conn = http.client.HTTPConnection("127.0.0.1", console_process.port, timeout=10)

    def get(path: str, headers: dict[str, str] | None = None) -> http.client.HTTPResponse:
        conn.request("GET", path, headers=headers or {})
        answer = conn.getresponse()
        answer.read()
        return answer

    assert get("/").status == 401
    assert get("/", {"Host": "rebound.example"}).status == 403
    login_answer = get(url.split(str(console_process.port), 1)[1])
    assert login_answer.status == 303 and login_answer.getheader("location") == "/"
    cookie = login_answer.getheader("set-cookie", "").split(";")[0]
    page = get("/", {"Cookie": cookie})
    assert page.status == 200 and page.getheader("content-security-policy") == CSP
    assert page.getheader("server") is None
    # Bound to 127.0.0.1 only: the listening socket's address, from the kernel's own table.
    listening = Path("/proc/net/tcp").read_text().splitlines()[1:]
    port_hex = f"{console_process.port:04X}"
    local = [line.split()[1] for line in listening if line.split()[1].endswith(":" + port_hex)
             and line.split()[3] == "0A"]
    assert local == [f"0100007F:{port_hex}"]
    conn.close()


def test_console_refuses_to_start_without_a_daemon_and_says_how_to_start_one(tmp_path: Path) -> None:
    sock = Path("/tmp") / f"md-no-daemon-{tmp_path.name[-8:]}" / "memoryd.sock"
    env = {**hermetic_env(tmp_path), "MEMORYD_SOCKET": str(sock)}
    done = subprocess.run([str(MEMORYD), "console"], env=env, capture_output=True, text=True, timeout=60,
                          stdin=subprocess.DEVNULL)
    assert done.returncode == 3 and done.stdout == ""
    assert "memoryd is not running" in done.stderr
    assert "`memoryd run`" in done.stderr and "`memoryd service install`" in done.stderr


def test_console_json_prints_one_line_with_url_and_port(console_process: ConsoleProcess) -> None:
    assert set(console_process.printed) == {"url", "port"}
    assert console_process.url.startswith(f"http://127.0.0.1:{console_process.port}/?token=")
    json.dumps(console_process.printed)


def test_the_listening_socket_is_loopback_tcp_by_protocol_number() -> None:
    """asyncio sets TCP_NODELAY only on sockets made with proto IPPROTO_TCP; without it each
    page waited ~40 ms on a delayed ACK (bench/console.py)."""
    import socket

    from memoryd.console import server

    sock = server.bind(0)
    try:
        assert sock.proto == socket.IPPROTO_TCP
        assert sock.getsockname()[0] == "127.0.0.1" and sock.getsockname()[1] > 0
    finally:
        sock.close()
