"""The console driven by a real headless Chromium (Debian's package, through Selenium and
/usr/bin/chromedriver; nothing is downloaded): log in, search, open a memory, approve a
proposal, forget a memory, retry a dead job, verify the audit chain, see the charts.

Every request the browser makes is read from its DevTools network log; none may leave
the console's origin. ``MEMORYD_CONSOLE_SHOTS=DIR`` saves a screenshot of each page into
DIR (docs/console/ was made that way); without it they go to a temporary directory.
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.console.conftest import ConsoleProcess, chromium_paths, kill_embed_job, propose_supersede
from tests.integration.harness import DaemonHandle, wait_until
from tests.lifecycle.helpers import wait_status

pytest.importorskip("starlette", reason="the console extra (starlette, jinja2, uvicorn) is not installed")
webdriver = pytest.importorskip("selenium.webdriver",
                                reason="selenium is not installed (the dev extra has it)")
if chromium_paths() is None:
    pytest.skip("chromium and chromium-driver are not installed (Debian: apt-get install -y chromium "
                "chromium-driver; .ci/run installs them)", allow_module_level=True)

from selenium.webdriver.chrome.service import Service  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.remote.webdriver import WebDriver  # noqa: E402


class Browser:
    """A headless Chromium on one console, and every URL it has requested so far."""

    def __init__(self, console: ConsoleProcess, shots: Path):
        paths = chromium_paths()
        assert paths is not None
        options = webdriver.ChromeOptions()
        options.binary_location = paths[0]
        for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--window-size=1280,1100",
                     "--disable-dev-shm-usage", "--disable-background-networking", "--disable-sync",
                     "--disable-component-update", "--disable-default-apps", "--no-first-run",
                     "--disable-extensions", "--metrics-recording-only", "--mute-audio"):
            options.add_argument(flag)
        options.set_capability("goog:loggingPrefs", {"performance": "ALL"})
        self.driver: WebDriver = webdriver.Chrome(service=Service(paths[1]), options=options)
        self.driver.set_page_load_timeout(30)
        self.console = console
        self.shots = shots
        self.requested: list[str] = []

    def open(self, path: str) -> None:
        self.driver.get(self.console.origin + path)

    def find(self, css: str) -> Any:
        return self.driver.find_element(By.CSS_SELECTOR, css)

    def find_all(self, css: str) -> list[Any]:
        return list(self.driver.find_elements(By.CSS_SELECTOR, css))

    def text(self, css: str) -> str:
        return str(self.find(css).text)

    def shot(self, name: str) -> None:
        """The whole page (the window grown to its height, at most 2,400 px) as NAME.png."""
        height = int(self.driver.execute_script("return document.documentElement.scrollHeight"))
        self.driver.set_window_size(1280, min(max(height, 600), 2400))
        try:
            self.driver.save_screenshot(str(self.shots / f"{name}.png"))
        finally:
            self.driver.set_window_size(1280, 1100)

    def drain(self) -> None:
        """Move the DevTools log's request URLs into ``requested``."""
        for entry in self.driver.get_log("performance"):
            message = json.loads(entry["message"])["message"]
            if message.get("method") == "Network.requestWillBeSent":
                self.requested.append(message["params"]["request"]["url"])

    def quit(self) -> None:
        self.driver.quit()


@pytest.fixture(scope="module")
def console_module(console_daemon: DaemonHandle) -> Iterator[ConsoleProcess]:
    proc = ConsoleProcess(console_daemon)
    try:
        yield proc
    finally:
        proc.stop()


@pytest.fixture(scope="module")
def browser(console_module: ConsoleProcess) -> Iterator[Browser]:
    wanted = os.environ.get("MEMORYD_CONSOLE_SHOTS")
    with tempfile.TemporaryDirectory(prefix="md-shots-") as scratch:
        shots = Path(wanted) if wanted else Path(scratch)
        shots.mkdir(parents=True, exist_ok=True)
        b = Browser(console_module, shots)
        try:
            b.driver.get(console_module.url)  # the printed URL, token and all: the login
            yield b
        finally:
            b.quit()


@pytest.fixture(autouse=True)
def _drain_network_log(browser: Browser) -> Iterator[None]:
    yield
    browser.drain()


def test_the_token_url_logs_in_and_lands_on_the_overview_without_the_token(browser: Browser) -> None:
    browser.open("/")
    assert browser.driver.current_url == browser.console.origin + "/"
    assert "token" not in browser.driver.current_url
    assert browser.find("#health").text in ("healthy", "degraded")
    # HttpOnly: the page's own script cannot read the session cookie.
    assert browser.driver.execute_script("return document.cookie") == ""


def test_the_overview_charts_have_data_points(browser: Browser, console_daemon: DaemonHandle) -> None:
    for i in range(3):
        console_daemon.write(f"Chart point seed {i}: the deploy freeze starts Friday", agent_id="b1")
    time.sleep(0.8)  # a few readings (metrics_interval_s 0.2) after the writes
    browser.open("/")
    charts = {svg.get_attribute("id"): svg for svg in browser.find_all("svg.chart")}
    assert set(charts) == {"chart-queues", "chart-throughput", "chart-errors", "chart-cpu", "chart-rss",
                           "chart-rates"}
    for key in ("chart-cpu", "chart-rss", "chart-rates", "chart-queues"):
        lines = charts[key].find_elements(By.CSS_SELECTOR, "polyline")
        assert lines, key
        assert all(int(line.get_attribute("data-points")) >= 2 for line in lines), key
        assert len(lines[0].get_attribute("points").split()) >= 2
    browser.shot("overview")


def test_search_finds_a_memory_and_its_page_shows_text_kind_and_history(
        browser: Browser, console_daemon: DaemonHandle) -> None:
    written = console_daemon.write("The staging database is Postgres 15 on db1:5432", agent_id="b1")
    browser.open("/memories")
    browser.find("#q").send_keys("staging database")
    browser.find("#f-agent_id").send_keys("b1")
    browser.find("#go").click()
    wait_until(lambda: browser.find_all("#mode-used"), timeout_s=10, message="the search results")
    assert "lexical" in browser.text("#mode-used")  # --embedder none: hybrid falls back, and says so
    assert browser.find_all("#notices li"), "the notices the API returned are shown"
    links = [a for a in browser.find_all("a.memory-link") if "db1:5432" in a.text]
    assert links
    browser.shot("memories")
    links[0].click()
    wait_until(lambda: browser.driver.current_url.endswith(f"/memories/{written['id']}"), timeout_s=10,
               message="the memory's page")
    assert browser.text("#content") == "The staging database is Postgres 15 on db1:5432"
    assert browser.text("#memory-status") == "active"
    assert "memory.write" in browser.text("#history") or "write" in browser.text("#history")
    browser.shot("memory")


def test_approving_a_proposal_in_the_review_page_supersedes_the_old_memory(
        browser: Browser, console_daemon: DaemonHandle) -> None:
    old = console_daemon.write("The API rate limit is 100 requests a minute", agent_id="b1")["id"]
    new = console_daemon.write("The API rate limit is 500 requests a minute", agent_id="b1")["id"]
    pid = propose_supersede(console_daemon, old, new, "same subject (the API rate limit), newer value")
    browser.open("/review")
    card = browser.find(f"#proposal-{pid}")
    assert "100 requests" in card.text and "500 requests" in card.text and "newer value" in card.text
    browser.shot("review")
    card.find_element(By.CSS_SELECTOR, "input.pick").click()
    browser.find("#note").send_keys("checked with the API team")
    browser.find("#approve").click()
    wait_until(lambda: browser.find_all("#outcomes"), timeout_s=10, message="the decision's outcome")
    assert f"{pid}: approved" in browser.text("#outcomes")
    browser.open(f"/memories/{old}")
    assert browser.text("#memory-status") == "superseded"
    assert console_daemon.call("review.get", {"id": pid}, admin=True)["proposal"]["note"] == \
        "checked with the API team"


def test_forgetting_a_memory_asks_first_then_erases_it(browser: Browser,
                                                      console_daemon: DaemonHandle) -> None:
    doomed = console_daemon.write("The old VPN password hint is blue-horse", agent_id="b1")["id"]
    browser.open(f"/memories/{doomed}")
    browser.find("#forget-link").click()
    warning = browser.text("#forget-warning")
    assert "erases" in warning and "vector" in warning and "tombstone" in warning
    assert console_daemon.call("memory.get", {"id": doomed})["status"] == "active"  # nothing yet
    browser.shot("forget")
    browser.find("#forget-confirm").click()
    wait_until(lambda: browser.driver.current_url.endswith(f"/memories/{doomed}"), timeout_s=10,
               message="the redirect back to the memory")
    assert browser.text("#memory-status") in ("deleting", "forgotten")
    wait_status(console_daemon, doomed, "forgotten")
    browser.open(f"/memories/{doomed}")
    assert browser.text("#memory-status") == "forgotten" and "blue-horse" not in browser.driver.page_source
    browser.open("/memories?q=VPN+password+hint&agent_id=b1&mode=lexical")
    assert "blue-horse" not in browser.text("#results")


def test_retrying_a_dead_job_revives_it(browser: Browser, console_daemon: DaemonHandle) -> None:
    memory_id = console_daemon.write("Releases are tagged from the main branch", agent_id="b1")["id"]
    job_id = kill_embed_job(console_daemon, memory_id)
    browser.open("/jobs")
    assert "seeded by the console test" in browser.text("#dead-jobs")
    browser.shot("jobs")
    browser.find(f"#job-{job_id}").click()
    browser.find("#retry").click()
    wait_until(lambda: browser.find_all("#revived"), timeout_s=10, message="the retry's outcome")
    assert "Revived 1 job(s)" in browser.text("#revived")
    dead = console_daemon.call("queue.list", {"state": "dead"}, admin=True)["jobs"]
    assert job_id not in [j["id"] for j in dead]


def test_the_audit_page_runs_audit_verify(browser: Browser) -> None:
    browser.open("/audit")
    browser.find("#verify").click()
    wait_until(lambda: browser.find_all("#audit-result"), timeout_s=30, message="audit.verify's result")
    assert "The chain verifies" in browser.text("#audit-result")
    browser.shot("audit")


def test_the_browser_requested_nothing_outside_the_console_origin(browser: Browser) -> None:
    for path in ("/", "/?window=day", "/memories", "/review", "/jobs", "/audit"):
        browser.open(path)
    browser.drain()
    assert len(browser.requested) >= 10  # positive control: the log did record the pages
    assert any(url.endswith("/static/console.css") for url in browser.requested)
    outside = [url for url in browser.requested if not url.startswith(browser.console.origin + "/")]
    assert outside == []
