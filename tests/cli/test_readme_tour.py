"""README.md's "A 60-second tour", run from the README's own text against a real daemon.

The ``sh`` block under the tour heading is read from README.md, and each
line runs through ``sh -c`` as written; the only change is that
``.venv/bin/memoryd`` becomes this environment's console script (the one
under test), and the environment's ``MEMORYD_SOCKET`` points the commands at
a test daemon. What the README's prose says happened is asserted: the two
writes queue ``embed, extract``, the third is the duplicate line with the
first id, the searches find the Postgres fact, and status says healthy. If
the tour's commands stop working, or stop doing that, these tests fail.

The kind shown in the tables is not asserted (the classify pass decides it).
"""

from __future__ import annotations

import re
import shlex
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.cli.conftest import MEMORYD, Cli
from tests.integration.harness import DaemonHandle, wait_until

README = Path(__file__).resolve().parents[2] / "README.md"
TOUR_HEADING = "## A 60-second tour"
README_COMMAND = ".venv/bin/memoryd"
MEMORY_ID = r"mem_[0-9A-HJKMNP-TV-Z]{26}"
POSTGRES_FACT = "The staging database is Postgres 15 on db1:5432"
#: docs/protocol.md "Notices": the vector leg's reasons, as sent.
SKIPPED_NONE = ("vector leg skipped (embedder disabled (--embedder none); embed jobs stay queued); "
                "results are lexical only")
SKIPPED_LOADING = ("vector leg skipped (the embedder is loading; retry in a few seconds); "
                   "results are lexical only")


@dataclass
class TourLine:
    """One command line of the tour, as the README writes it."""

    text: str

    @property
    def argv(self) -> list[str]:
        return shlex.split(self.text, comments=True)

    @property
    def command(self) -> str:
        """The memoryd subcommand (``write``, ``search``, ``status``)."""
        return self.argv[1]


def tour_lines(readme_text: str) -> list[TourLine]:
    """The command lines of the first ```sh block after the tour heading."""
    _, found, after = readme_text.partition(TOUR_HEADING + "\n")
    assert found, f"README.md has no {TOUR_HEADING!r} section"
    match = re.search(r"^```sh\n(.*?)^```", after, flags=re.S | re.M)
    assert match, f"no ```sh block under {TOUR_HEADING!r}"
    lines = [TourLine(line) for line in match.group(1).splitlines() if line.strip()]
    for line in lines:
        assert line.argv[0] == README_COMMAND, f"tour line does not run {README_COMMAND}: {line.text!r}"
    return lines


def run_tour_line(cli: Cli, line: TourLine) -> subprocess.CompletedProcess[str]:
    """The line through ``sh -c``, with the README's relative command made this venv's script."""
    assert line.text.startswith(README_COMMAND)
    text = shlex.quote(str(MEMORYD)) + line.text[len(README_COMMAND):]
    ran = cli.shell(text)
    assert ran.returncode == 0, f"`{line.text}` exited {ran.returncode}:\n{ran.stdout}\n{ran.stderr}"
    return ran


def ids_in(text: str) -> list[str]:
    """Memory ids in the order they appear (rows of a results table, top first)."""
    return re.findall(MEMORY_ID, text)


def test_the_tour_block_is_found_and_has_the_commands_the_prose_describes() -> None:
    lines = tour_lines(README.read_text(encoding="utf-8"))
    assert [line.command for line in lines] == ["write", "write", "write", "search", "search", "status"]
    first, _, third = (line.argv for line in lines[:3])
    assert first == third  # the prose: "the third is the same text in the same scope"
    assert POSTGRES_FACT in first


def check_writes(cli: Cli, lines: list[TourLine]) -> tuple[str, str]:
    """Run the three writes; assert the README's lines; return the two ids."""
    outputs = [run_tour_line(cli, line).stdout.strip() for line in lines[:3]]
    queued = [re.fullmatch(rf"({MEMORY_ID}) queued: embed, extract", out) for out in outputs[:2]]
    assert all(queued), outputs
    first, second = (m.group(1) for m in queued if m)
    assert first != second
    assert outputs[2] == f"{first} (duplicate of an existing memory; nothing written)"
    return first, second


def check_status(cli: Cli, line: TourLine, daemon: DaemonHandle) -> str:
    shown = run_tour_line(cli, line).stdout
    head = shown.splitlines()[0]
    assert re.match(rf"memoryd \S+  healthy  pid {daemon.proc.pid}  up ", head), head  # type: ignore[union-attr]
    assert "memories: active 2" in shown  # two rows written, the duplicate added none
    return shown


def test_tour_runs_verbatim_with_the_embedder_off(start_daemon: Callable[..., DaemonHandle],
                                                  cli_for: Callable[[DaemonHandle], Cli]) -> None:
    """The fast variant: every line works, and both searches answer lexically, saying why."""
    daemon = start_daemon("tour")
    cli = cli_for(daemon)
    lines = tour_lines(README.read_text(encoding="utf-8"))
    first, second = check_writes(cli, lines)
    for line in lines[3:5]:
        shown = run_tour_line(cli, line).stdout
        assert "note: " + SKIPPED_NONE in shown, shown
        assert "mode: lexical" in shown
        assert ids_in(shown)[0] == first, shown  # the Postgres fact, ranked first
        assert POSTGRES_FACT in shown
    check_status(cli, lines[5], daemon)
    # What the CLI printed is what the store holds: one row per distinct text.
    assert daemon.count_content(POSTGRES_FACT) == 1
    assert {r[0] for r in daemon.query("SELECT id FROM memories")} == {first, second}


@pytest.mark.slow
def test_tour_runs_verbatim_with_the_bundled_embedder(start_daemon: Callable[..., DaemonHandle],
                                                      cli_for: Callable[[DaemonHandle], Cli]) -> None:
    """The README's run: the first search may come before the model loads (lexical, with the
    loading notice); the second, "half a minute later", fuses both legs and ranks the fact first."""
    daemon = start_daemon("tour-bundled", embedder="bundled")
    cli = cli_for(daemon)
    lines = tour_lines(README.read_text(encoding="utf-8"))
    first, second = check_writes(cli, lines)

    early = run_tour_line(cli, lines[3]).stdout
    assert first in ids_in(early), early
    if "mode: lexical" in early:
        assert "note: " + SKIPPED_LOADING in early, early
    else:  # the model was already loaded: a hybrid answer is what the README promises after it
        assert "mode: hybrid" in early, early

    # "again, half a minute later": once the embed pass has encoded both memories.
    def embedded() -> bool:
        status = daemon.call("daemon.status")
        queue = status["queues"]["embed"]
        assert queue["dead"] == 0, status["passes"]["embed"]
        return bool(status["models"]["embedder"]["loaded"]) and queue["ready"] + queue["leased"] == 0 \
            and daemon.scalar("SELECT count(*) FROM memory_vectors") == 2

    wait_until(embedded, timeout_s=600, interval_s=0.5,
               message="the embed pass to encode the tour's memories")
    later = run_tour_line(cli, lines[4]).stdout
    assert "mode: hybrid" in later, later
    assert "vector leg skipped" not in later
    # "With only two memories the vector leg returns both": the fact first, the other second.
    assert ids_in(later) == [first, second], later
    check_status(cli, lines[5], daemon)
