"""1005: the daemon checks the peer's uid (SO_PEERCRED), not just the socket file's mode.

The daemon runs as ``nobody``; the test loosens its socket to 0666 (a
misconfiguration) so another user can reach it, and connects as ``daemon``
(uid 1). That peer must be told 1005 and cut off, while the daemon's own uid
and root are served.
"""

from __future__ import annotations

import json
import os
import pwd
import shutil
import stat
import subprocess
import sys
from collections.abc import Callable
from typing import Any

import pytest

from tests.integration.harness import SITE_PACKAGES, SRC_DIR, DaemonHandle

pytestmark = pytest.mark.skipif(os.getuid() != 0, reason="needs root to run processes as other users")

#: A stdlib-only client, so it runs under any interpreter the other user may execute.
PEER_SCRIPT = r"""
import json, socket, sys
path, mode = sys.argv[1], sys.argv[2]
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.settimeout(15)
s.connect(path)
f = s.makefile("rb")
out = {}
if mode == "ping":
    s.sendall(b'{"jsonrpc":"2.0","id":1,"method":"daemon.ping"}\n')
    out["first"] = json.loads(f.readline())
else:
    out["first"] = json.loads(f.readline())  # a refused peer is told before it asks anything
    write = {"jsonrpc": "2.0", "id": 2, "method": "memory.write",
             "params": {"content": "written by a foreign uid", "agent_id": "intruder"}}
    try:
        s.sendall(json.dumps(write).encode() + b"\n")
        out["closed"] = f.readline() == b""
    except TimeoutError:
        out["closed"] = False
    except OSError:
        out["closed"] = True
print(json.dumps(out))
"""


def _user(name: str) -> pwd.struct_passwd:
    try:
        return pwd.getpwnam(name)
    except KeyError:
        pytest.skip(f"this system has no {name!r} user")


def _python_for(user: pwd.struct_passwd, probe: str, env: dict[str, str]) -> str | None:
    """An interpreter ``user`` may execute that can run ``probe`` (None when there is none).

    The venv's interpreter often lives under a private home (/root/.pyenv here);
    a system python3 with the venv's site-packages on PYTHONPATH serves then.
    """
    candidates = dict.fromkeys(c for c in (sys.executable, "/usr/bin/python3", shutil.which("python3")) if c)
    for exe in candidates:
        try:
            ran = subprocess.run([exe, "-c", probe], user=user.pw_uid, group=user.pw_gid, extra_groups=[],
                                 env=env, cwd="/", capture_output=True, timeout=120, check=False)
        except OSError:
            continue
        if ran.returncode == 0:
            return exe
    return None


def _run_peer(user: pwd.struct_passwd, python: str, path: str, mode: str) -> dict[str, Any]:
    ran = subprocess.run([python, "-c", PEER_SCRIPT, path, mode], user=user.pw_uid, group=user.pw_gid,
                         extra_groups=[], env={"PATH": "/usr/bin:/bin"}, cwd="/", capture_output=True,
                         text=True, timeout=60, check=False)
    assert ran.returncode == 0, f"peer client as {user.pw_name} failed:\n{ran.stderr}"
    result: dict[str, Any] = json.loads(ran.stdout)
    return result


@pytest.mark.sqlite_only("the daemon runs as 'nobody', who cannot reach the embedded PostgreSQL's "
                         "socket (inside its 0700 data dir); peer credentials are checked before "
                         "any store access")
def test_connection_from_another_uid_is_forbidden_and_closed_even_on_a_loosened_socket(
        start_daemon: Callable[..., DaemonHandle]) -> None:
    owner, other = _user("nobody"), _user("daemon")
    pypath = {"PYTHONPATH": f"{SRC_DIR}{os.pathsep}{SITE_PACKAGES}"}
    daemon_python = _python_for(owner, "import memoryd.daemon.app", {"PATH": "/usr/bin:/bin", **pypath})
    if daemon_python is None:
        pytest.skip(f"no Python interpreter that user 'nobody' may execute can import memoryd "
                    f"(tried {sys.executable} and /usr/bin/python3 with PYTHONPATH={pypath['PYTHONPATH']})")
    peer_python = _python_for(other, "import json, socket", {"PATH": "/usr/bin:/bin"})
    if peer_python is None:
        pytest.skip("no Python interpreter that user 'daemon' may execute")

    daemon = start_daemon("asnobody", user=owner.pw_uid, group=owner.pw_gid, python=daemon_python,
                          env=pypath)
    assert daemon.socket.stat().st_uid == owner.pw_uid
    assert daemon.data_dir.stat().st_uid == owner.pw_uid
    assert stat.S_IMODE(daemon.socket.stat().st_mode) == 0o600
    # Root is accepted although it is not the daemon's uid (start() already pinged as root).
    kept = daemon.write("written by root", agent_id="agent-a")

    # The misconfiguration: every directory on the way and the socket itself opened up.
    for directory in (daemon.home, daemon.socket.parent):
        directory.chmod(0o711)
    daemon.socket.chmod(0o666)

    refused = _run_peer(other, peer_python, str(daemon.socket), "refused")
    assert refused["first"]["id"] is None
    assert refused["first"]["error"]["code"] == 1005
    assert refused["closed"] is True
    assert daemon.count_content("written by a foreign uid") == 0
    assert '"connection.refused"' in daemon.stderr_text()

    # Positive control: the daemon's own uid, through the same loosened socket, is served.
    served = _run_peer(owner, peer_python, str(daemon.socket), "ping")
    assert served["first"]["result"]["pid"] == daemon.proc.pid  # type: ignore[union-attr]
    assert daemon.call("memory.get", {"id": kept["id"]})["content"] == "written by root"
    daemon.assert_alive()
