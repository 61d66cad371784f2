"""``memoryd status``: the exit codes of PROTOCOL.md's clarifications, and ``--watch``.

0 healthy and 3 not running are covered in tests/integration/test_lifecycle.py;
this file covers 1 (degraded), 2 (a bad config), 4 (a socket that is there
but refuses this user), and the live view.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import pty
import pwd
import re
import select
import shutil
import signal
import struct
import subprocess
import sys
import termios
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.cli.conftest import MEMORYD, WIDE, Cli, cli_env
from tests.integration.harness import SITE_PACKAGES, SRC_DIR, DaemonHandle, hermetic_env

EXIT_DEGRADED, EXIT_BAD_CONFIG, EXIT_NOT_RUNNING, EXIT_DENIED = 1, 2, 3, 4


@pytest.fixture
def daemon(module_daemon: DaemonHandle) -> DaemonHandle:
    """One daemon for the module: every test leaves it healthy (dead jobs revived)."""
    return module_daemon


def kill_embed_job(daemon: DaemonHandle, memory_id: str) -> int:
    """Turn the memory's embed job dead, as a job that failed every attempt ends (seeded:
    with ``--embedder none`` the job waits and nothing else touches it); return its id."""
    with daemon.db() as conn:
        conn.execute(
            "UPDATE jobs SET state = 'dead', attempts = max_attempts, finished_at = updated_at, "
            "last_error = 'seeded by the test: every attempt failed' "
            "WHERE pass = 'embed' AND target = ? AND state = 'ready'", (memory_id,))
        job_id: int = conn.execute(
            "SELECT id FROM jobs WHERE pass = 'embed' AND target = ? AND state = 'dead'",
            (memory_id,)).fetchone()[0]
    return job_id


# -- 1: degraded ---------------------------------------------------------------------------------

def test_a_dead_job_makes_status_exit_1_until_queue_retry_revives_it(daemon: DaemonHandle, cli: Cli) -> None:
    written = cli("write", "--agent-id", "a1", "Deploys go out on Tuesdays")
    assert written.returncode == 0, written.stderr
    memory_id = written.stdout.split()[0]
    healthy = cli("status")
    assert healthy.returncode == 0, healthy.stdout  # positive control before the job dies
    job_id = kill_embed_job(daemon, memory_id)

    degraded = cli("status")
    assert degraded.returncode == EXIT_DEGRADED, degraded.stdout + degraded.stderr
    assert "  degraded  " in degraded.stdout.splitlines()[0]
    assert "1 dead job(s)" in degraded.stdout and "memoryd queue list --state dead" in degraded.stdout
    as_json = cli("status", "--json")
    assert as_json.returncode == EXIT_DEGRADED  # --json prints the result and keeps the exit code
    status = json.loads(as_json.stdout)
    assert status["health"] == "degraded" and status["queues"]["embed"]["dead"] == 1

    listed = cli("queue", "list", "--state", "dead", "--json")
    assert listed.returncode == 0, listed.stderr
    [job] = json.loads(listed.stdout)["jobs"]
    assert (job["id"], job["pass"], job["target"], job["state"]) == (job_id, "embed", memory_id, "dead")
    table = cli("queue", "list", "--state", "dead")
    assert table.returncode == 0 and memory_id in table.stdout and "seeded by the test" in table.stdout

    revived = cli("queue", "retry", str(job_id))
    assert (revived.returncode, revived.stdout.strip()) == (0, "revived 1 job(s)"), revived.stderr
    assert cli("status").returncode == 0
    assert json.loads(cli("queue", "list", "--state", "dead", "--json").stdout)["jobs"] == []
    [ready] = json.loads(cli("queue", "list", "--pass", "embed", "--state", "ready", "--json").stdout)["jobs"]
    assert (ready["id"], ready["attempts"], ready["last_error"]) == (job_id, 0, None)


def test_queue_retry_by_pass_and_all_revive_only_dead_jobs(daemon: DaemonHandle, cli: Cli) -> None:
    ids = [cli("write", "--agent-id", "a1", text).stdout.split()[0]
           for text in ("The CI cache lives on ci-cache-01", "Releases are tagged from main")]
    dead = [kill_embed_job(daemon, memory_id) for memory_id in ids]
    assert cli("status").returncode == EXIT_DEGRADED
    nothing = cli("queue", "retry", "--pass", "extract")  # extract's jobs are alive: nothing to revive
    assert (nothing.returncode, nothing.stdout.strip()) == (0, "revived 0 job(s)")
    by_pass = cli("queue", "retry", "--pass", "embed", str(dead[0]))  # narrowed to one id
    assert by_pass.stdout.strip() == "revived 1 job(s)"
    assert cli("status").returncode == EXIT_DEGRADED  # the other one is still dead
    every = cli("queue", "retry", "--all")
    assert (every.returncode, every.stdout.strip()) == (0, "revived 1 job(s)")
    assert cli("status").returncode == 0


# -- 2: a bad config -----------------------------------------------------------------------------

BAD_CONFIGS = {
    "not-toml": ("max_connections = = 3\n", "not valid TOML"),
    "out-of-range": ("max_connections = 0\n", "max_connections"),
    "unknown-key": ("max_conections = 3\n", "max_conections"),
}


@pytest.mark.parametrize("case", list(BAD_CONFIGS))
@pytest.mark.parametrize("given_by", ["--config", "MEMORYD_CONFIG"])
def test_status_with_a_bad_config_exits_2_naming_the_problem(daemon: DaemonHandle, cli: Cli, short_tmp: Path,
                                                             case: str, given_by: str) -> None:
    text, named = BAD_CONFIGS[case]
    bad = short_tmp / f"{case}.toml"
    bad.write_text(text, encoding="utf-8")
    if given_by == "--config":
        shown = cli("status", "--config", str(bad))
    else:
        shown = cli("status", env={"MEMORYD_CONFIG": str(bad)})
    assert shown.returncode == EXIT_BAD_CONFIG, shown.stdout + shown.stderr
    assert named in shown.stderr and shown.stdout == ""
    # Positive control: the same command with a good file reaches the daemon.
    good = short_tmp / "good.toml"
    good.write_text("max_connections = 3\n", encoding="utf-8")
    assert cli("status", "--config", str(good)).returncode == 0


def test_a_config_file_that_does_not_exist_exits_2(cli: Cli, short_tmp: Path) -> None:
    shown = cli("status", "--config", str(short_tmp / "missing.toml"))
    assert shown.returncode == EXIT_BAD_CONFIG
    assert "does not exist" in shown.stderr


# -- 4: access denied ----------------------------------------------------------------------------

def _other_user() -> pwd.struct_passwd:
    try:
        return pwd.getpwnam("nobody")
    except KeyError:
        pytest.skip("this system has no 'nobody' user to run the client as")


def _python_for_nobody(user: pwd.struct_passwd, env: dict[str, str]) -> str:
    """An interpreter ``user`` may run that imports memoryd (the venv's often lives under /root)."""
    for exe in dict.fromkeys(c for c in (sys.executable, "/usr/bin/python3", shutil.which("python3")) if c):
        try:
            probe = subprocess.run([exe, "-c", "import memoryd.cli"], user=user.pw_uid, group=user.pw_gid,
                                   extra_groups=[], env=env, cwd="/", capture_output=True, timeout=120,
                                   check=False)
        except OSError:
            continue
        if probe.returncode == 0:
            return exe
    pytest.skip(f"no Python that user {user.pw_name!r} may run imports memoryd "
                f"(tried {sys.executable} and python3 with PYTHONPATH={env['PYTHONPATH']})")


def test_status_exits_4_when_the_socket_is_there_but_this_user_may_not_connect(daemon: DaemonHandle) -> None:
    """Root passes every permission check, so as root the client runs as ``nobody``; as
    another user the socket's directory is closed (mode 000) for the test's duration."""
    socket_path = str(daemon.socket)
    if os.getuid() == 0:
        user = _other_user()
        env = {"PATH": "/usr/bin:/bin", "HOME": "/nonexistent", "MEMORYD_SOCKET": socket_path,
               "PYTHONPATH": f"{SRC_DIR}{os.pathsep}{SITE_PACKAGES}", **WIDE}
        python = _python_for_nobody(user, env)
        shown = subprocess.run([python, "-m", "memoryd", "status"], user=user.pw_uid, group=user.pw_gid,
                               extra_groups=[], env=env, cwd="/", capture_output=True, text=True, timeout=120,
                               check=False)
    else:
        daemon.socket.parent.chmod(0o000)
        try:
            shown = subprocess.run([str(MEMORYD), "status"], env=cli_env(daemon), capture_output=True,
                                   text=True, timeout=120, check=False)
        finally:
            daemon.socket.parent.chmod(0o700)
    assert shown.returncode == EXIT_DENIED, shown.stdout + shown.stderr
    assert f"permission denied on {socket_path}" in shown.stderr
    assert "run this command as that user" in shown.stderr
    assert daemon.socket.exists()  # "present": not the not-running case (3)
    daemon.assert_alive()


# -- --watch ---------------------------------------------------------------------------------------

def _as_a_foreground_job() -> None:
    """Ctrl-C as a terminal's foreground job gets it: pytest run in the background by a shell
    without job control (a CI script's `cmd &`) starts with SIGINT ignored, and every child
    would inherit that, so the Ctrl-C test would fail there and nowhere else."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


@contextlib.contextmanager
def on_a_terminal(argv: list[str], env: dict[str, str]) -> Iterator[tuple[subprocess.Popen[bytes], int]]:
    """Run ``argv`` with a pseudo-terminal (200x60) as stdin, stdout and stderr."""
    leader, follower = pty.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 60, 200, 0, 0))
    proc = subprocess.Popen(argv, env=env, stdin=follower, stdout=follower, stderr=follower,
                            start_new_session=True, preexec_fn=_as_a_foreground_job)
    os.close(follower)
    try:
        yield proc, leader
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
        os.close(leader)


def read_for(fd: int, seconds: float) -> bytes:
    out = b""
    deadline = time.monotonic() + seconds
    while (left := deadline - time.monotonic()) > 0:
        ready, _, _ = select.select([fd], [], [], left)
        if ready:
            try:
                chunk = os.read(fd, 65536)
            except OSError:  # the process exited and closed the terminal
                break
            if not chunk:
                break
            out += chunk
    return out


def read_until_exit(proc: subprocess.Popen[bytes], fd: int, timeout_s: float) -> bytes:
    """Keep reading the terminal, as a real one does, until ``proc`` exits (or ``timeout_s``).

    A terminal nobody reads fills up: the live view's refresh thread then blocks on its
    write, holding the console, and the exit after Ctrl-C waits for it."""
    out = b""
    deadline = time.monotonic() + timeout_s
    while proc.poll() is None and time.monotonic() < deadline:
        out += read_for(fd, 0.2)
    return out + read_for(fd, 1.0)


def test_status_watch_redraws_with_fresh_figures_and_exits_0_on_ctrl_c(daemon: DaemonHandle,
                                                                       cli: Cli) -> None:
    active = json.loads(cli("status", "--json").stdout)["memories"].get("active", 0)
    with on_a_terminal([str(MEMORYD), "status", "--watch"], cli.env) as (proc, tty):
        first = read_for(tty, 3.5).decode(errors="replace")
        assert "memoryd" in first and "healthy" in first, first
        # The first frame shows the daemon as it was; a write meanwhile must appear in a later one.
        cli("write", "--agent-id", "a1", "watch me arrive")
        later = read_for(tty, 3.0).decode(errors="replace")
        proc.send_signal(signal.SIGINT)  # Ctrl-C
        rest = read_until_exit(proc, tty, 15).decode(errors="replace")
        assert proc.poll() == 0, f"exit {proc.poll()} after Ctrl-C (None: still running after 15 s)"
    screen = first + later + rest
    assert "rate/s" in screen  # the watch view's own column
    assert "\x1b[" in first  # drawn in place with cursor movement, not appended
    uptimes = set(re.findall(r"up (\d+s)", screen))
    assert len(uptimes) >= 2, uptimes  # redrawn with new figures, not one frame repeated
    assert f"memories: active {active}" in first if active else "memories: none" in first
    assert f"memories: active {active + 1}" in later + rest
    assert "Traceback" not in screen and "KeyboardInterrupt" not in screen


def test_status_watch_exits_3_when_nothing_runs(short_tmp: Path) -> None:
    env = hermetic_env(short_tmp, {"MEMORYD_SOCKET": str(short_tmp / "none" / "m.sock"), **WIDE})
    shown = subprocess.run([str(MEMORYD), "status", "--watch"], env=env, capture_output=True, text=True,
                           timeout=60, check=False, stdin=subprocess.DEVNULL)
    assert shown.returncode == EXIT_NOT_RUNNING
    assert "memoryd is not running" in shown.stderr


def test_cli_fixture_points_at_the_daemon(daemon: DaemonHandle,
                                          cli_for: Callable[[DaemonHandle], Cli]) -> None:
    """Sanity of the setup: the environment reaches this daemon and no other."""
    shown = cli_for(daemon)("status", "--json")
    assert json.loads(shown.stdout)["pid"] == daemon.proc.pid  # type: ignore[union-attr]
