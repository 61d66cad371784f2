"""A project's key comes from its repository's identity, not its folder name (docs/projects.md).

Repositories are made by the real ``git`` (``git init``, ``git remote add``,
``git worktree add``, ``git submodule add``), so the config files the key is
read from are the ones git writes. Two checkouts named ``api`` with different
origins are kept apart through real ``memoryd mcp --project auto`` bridges and
through real capture hooks; two clones of one origin (https and scp forms)
share; a repository with no origin is keyed on its path.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from memoryd.editors.project import project_name, project_of
from tests.editors.mcp_harness import bridge, call, ok, text_of
from tests.integration.harness import DaemonHandle, hermetic_env

CLIENT_ORIGIN = "https://deploy:s3cr3t-TOKEN@GitHub.com/client-co/api.git"
CLIENT_ORIGIN_SCP = "git@github.com:client-co/api"
CLIENT_KEY = "git:github.com/client-co/api"
STRANGER_ORIGIN = "https://github.com/stranger/api.git"
STRANGER_KEY = "git:github.com/stranger/api"


def git(*args: str, cwd: Path) -> None:
    env = {**os.environ, "GIT_CONFIG_GLOBAL": "/dev/null", "GIT_CONFIG_NOSYSTEM": "1",
           "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.com",
           "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.com"}
    subprocess.run(["git", *args], cwd=cwd, env=env, check=True, capture_output=True, timeout=60)


def repo(path: Path, origin: str | None = None) -> Path:
    """A git repository at ``path`` (with a ``src`` folder), its origin set by git itself."""
    (path / "src").mkdir(parents=True)
    git("init", "-q", str(path), cwd=path.parent)
    if origin is not None:
        git("remote", "add", "origin", origin, cwd=path)
    return path


# -- the key, from repositories git made ------------------------------------------------------

def test_two_clones_share_a_key_and_a_same_named_repository_of_another_origin_does_not(
        tmp_path: Path) -> None:
    client = repo(tmp_path / "client" / "api", CLIENT_ORIGIN)
    clone = repo(tmp_path / "clone" / "api", CLIENT_ORIGIN_SCP)
    ssh = repo(tmp_path / "ssh" / "api", "ssh://git@github.com:22/client-co/api/")
    stranger = repo(tmp_path / "stranger" / "api", STRANGER_ORIGIN)
    assert project_of(client / "src").key == CLIENT_KEY
    assert project_of(clone).key == CLIENT_KEY
    assert project_of(ssh).key == CLIENT_KEY
    assert project_of(stranger / "src").key == STRANGER_KEY
    # The name is the folder's, the same for all four: display only.
    assert {project_name(p) for p in (client, clone, ssh, stranger)} == {"api"}


def test_no_credential_of_the_origin_url_reaches_the_key(tmp_path: Path) -> None:
    client = repo(tmp_path / "api", CLIENT_ORIGIN)
    key = project_of(client).key
    assert "s3cr3t" not in key and "deploy" not in key and "TOKEN" not in key
    assert key == CLIENT_KEY


def test_a_repository_without_origin_is_keyed_on_its_real_path(tmp_path: Path) -> None:
    plain = repo(tmp_path / "real" / "api")
    (tmp_path / "link").symlink_to(tmp_path / "real")
    assert project_of(tmp_path / "link" / "api" / "src").key == f"path:{plain.resolve()}"
    other = repo(tmp_path / "other" / "api")
    assert project_of(other).key == f"path:{other.resolve()}" != project_of(plain).key
    not_git = tmp_path / "notes"
    not_git.mkdir()
    assert project_of(not_git).key == f"path:{not_git.resolve()}"


def test_a_linked_worktree_and_a_submodule_read_their_gitdir_files(tmp_path: Path) -> None:
    main = repo(tmp_path / "api", CLIENT_ORIGIN_SCP)
    git("commit", "-q", "--allow-empty", "-m", "first", cwd=main)
    git("worktree", "add", "-q", str(tmp_path / "api-hotfix"), cwd=main)
    assert (tmp_path / "api-hotfix" / ".git").is_file()  # "gitdir: …/.git/worktrees/api-hotfix"
    assert project_of(tmp_path / "api-hotfix").key == CLIENT_KEY
    assert project_of(tmp_path / "api-hotfix").name == "api-hotfix"

    lib = repo(tmp_path / "lib")
    git("commit", "-q", "--allow-empty", "-m", "lib", cwd=lib)
    git("-c", "protocol.file.allow=always", "submodule", "add", "-q", str(lib), "vendor/lib", cwd=main)
    assert (main / "vendor" / "lib" / ".git").is_file()
    # The submodule is its own repository, cloned from a local path: keyed on that path.
    assert project_of(main / "vendor" / "lib").key == f"git:{lib.resolve()}"
    # A worktree of a repository without origin keys on the main work tree's path.
    git("worktree", "add", "-q", str(tmp_path / "lib-wt"), cwd=lib)
    assert project_of(tmp_path / "lib-wt").key == f"path:{lib.resolve()}"


@pytest.mark.parametrize(("url", "key"), [
    ("git@GitHub.com:Acme/API.git", "git:github.com/Acme/API"),
    ("https://user:pw@gitlab.example.com:8443/group/sub/proj.git/", "git:gitlab.example.com/group/sub/proj"),
    ("ssh://git@github.com:22/acme/api", "git:github.com/acme/api"),
    ("git://github.com/acme/api.git", "git:github.com/acme/api"),
    ("https://github.com/acme/api?private_token=abc#frag", "git:github.com/acme/api"),
    ("https://github.com/acme/my%20api.git", "git:github.com/acme/my api"),
    ("file:///srv/git/api.git", "git:/srv/git/api"),
    ("/srv/git/api.git/", "git:/srv/git/api"),
])
def test_origin_forms_normalise_to_one_key(tmp_path: Path, url: str, key: str) -> None:
    checkout = repo(tmp_path / "api", url)
    assert project_of(checkout).key == key


def test_a_fifo_for_a_git_config_does_not_hang_and_falls_back_to_the_path(tmp_path: Path) -> None:
    hostile = tmp_path / "api"
    (hostile / ".git").mkdir(parents=True)
    os.mkfifo(hostile / ".git" / "config")
    started = time.monotonic()
    found = project_of(hostile)
    assert time.monotonic() - started < 30  # a hang guard: opening a FIFO to read blocks forever
    assert found.key == f"path:{hostile.resolve()}"


def test_a_key_longer_than_an_owner_field_is_hashed(tmp_path: Path) -> None:
    long_path = "/".join(["segment-of-a-long-repository-path"] * 10)
    checkout = repo(tmp_path / "api", f"https://github.com/{long_path}.git")
    key = project_of(checkout).key
    assert key.startswith("git:sha256:") and len(key) == len("git:sha256:") + 64


# -- through real bridges ------------------------------------------------------------------

def test_same_named_repositories_keep_their_memories_apart_and_clones_share(
        daemon: DaemonHandle, short_tmp: Path) -> None:
    client = repo(short_tmp / "c" / "api", CLIENT_ORIGIN)
    clone = repo(short_tmp / "k" / "api", CLIENT_ORIGIN_SCP)
    stranger = repo(short_tmp / "s" / "api", STRANGER_ORIGIN)
    me = ("--agent-id", "agent-me", "--user-id", "user-me", "--project", "auto")

    async def body() -> None:
        async with bridge(daemon.socket, daemon.home, *me, cwd=client / "src") as ours, \
                bridge(daemon.socket, daemon.home, *me, cwd=stranger / "src") as theirs, \
                bridge(daemon.socket, daemon.home, *me, cwd=clone) as cloned:
            secret = ok(await call(ours, "remember",
                                   {"content": "the client's staging DB password is in vault"}))
            query = {"query": "staging DB password vault", "mode": "lexical"}
            assert ok(await call(theirs, "recall", query))["results"] == []
            for tool, args in (("get_memory", {"id": secret["id"]}),
                               ("update_memory", {"id": secret["id"], "content": "overwritten"}),
                               ("forget", {"id": secret["id"]})):
                refused = await call(theirs, tool, args)
                assert refused.is_error and "is visible" in text_of(refused), tool
            # Positive controls: the writer and a clone of the same origin (scp form) see it.
            assert [h["id"] for h in ok(await call(ours, "recall", query))["results"]] == [secret["id"]]
            assert [h["id"] for h in ok(await call(cloned, "recall", query))["results"]] == [secret["id"]]
            identity = ok(await call(ours, "memory_status"))["identity"]
            assert (identity["project"], identity["project_name"]) == (CLIENT_KEY, "api")

    asyncio.run(body())
    row = daemon.call("memory.get", {"id": daemon.query(
        "SELECT id FROM memories WHERE content LIKE '%staging DB password%'")[0][0]})
    assert (row["status"], row["project"]) == ("active", CLIENT_KEY)
    assert "s3cr3t" not in json.dumps(row)


# -- through real capture hooks --------------------------------------------------------------

def _transcript(folder: Path, session: str, text: str) -> Path:
    path = folder / f"{session}.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    entry = {"type": "user", "uuid": f"{session}-0000-0000-0000-000000000000", "sessionId": session,
             "timestamp": "2026-01-05T10:00:00Z", "message": {"role": "user", "content": text}}
    path.write_text(json.dumps(entry) + "\n")
    return path


def _hook(daemon: DaemonHandle, transcripts: Path, cwd: Path, transcript: Path, session: str) -> None:
    env = hermetic_env(daemon.home, {"MEMORYD_SOCKET": str(daemon.socket),
                                     "MEMORYD_DATA_DIR": str(daemon.data_dir),
                                     "MEMORYD_CAPTURE_TRANSCRIPT_DIRS": str(transcripts)})
    payload = {"hook_event_name": "Stop", "session_id": session, "transcript_path": str(transcript),
               "cwd": str(cwd)}
    done = subprocess.run([sys.executable, "-m", "memoryd", "capture", "claude-code", "--budget-ms", "10000",
                           "--verbose"], input=json.dumps(payload), env=env, capture_output=True, text=True,
                          timeout=60, check=False)
    assert (done.returncode, done.stdout) == (0, ""), done.stderr
    assert "capture: sent 1" in done.stderr, done.stderr


def test_capture_in_same_named_repositories_writes_under_each_ones_key(
        daemon: DaemonHandle, short_tmp: Path) -> None:
    client = repo(short_tmp / "c" / "api", CLIENT_ORIGIN)
    stranger = repo(short_tmp / "s" / "api", STRANGER_ORIGIN)
    transcripts = short_tmp / "transcripts"
    _hook(daemon, transcripts, client / "src",
          _transcript(transcripts, "sess-client", "the client's release key lives in the HSM"), "sess-client")
    _hook(daemon, transcripts, stranger,
          _transcript(transcripts, "sess-stranger", "the stranger's repo builds with make"), "sess-stranger")
    async def body() -> None:
        auto = ("--agent-id", "agent-me", "--user-id", "user-me", "--project", "auto")
        async with bridge(daemon.socket, daemon.home, *auto, cwd=stranger) as theirs, \
                bridge(daemon.socket, daemon.home, *auto, cwd=client) as ours:
            query = {"query": "release key HSM", "mode": "lexical"}
            assert ok(await call(theirs, "recall", query))["results"] == []
            assert len(ok(await call(ours, "recall", query))["results"]) == 1  # positive control

    asyncio.run(body())
    rows = dict(daemon.query("SELECT session_id, project FROM memories WHERE kind = 'conversation'"))
    assert rows == {"sess-client": CLIENT_KEY, "sess-stranger": STRANGER_KEY}
