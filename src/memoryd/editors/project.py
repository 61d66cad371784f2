"""The identity editors write under: the project ``--project auto`` names, the default user.

The MCP bridge and Claude Code capture both name a project and a user this
way, so the rows one writes are the rows the other reads.

A project has a **key** and a **name** (docs/projects.md). The key is what
``project`` scope compares, so it must tell repositories apart: two checkouts
that happen to share a folder name (a client's ``api`` and an untrusted clone
of someone else's ``api``) must never read each other's memories, while two
clones of one repository should share theirs. It is therefore built from the
repository's identity:

* ``git:HOST/PATH`` from its ``origin`` remote's URL, normalised (scheme, user,
  password, port, query, a trailing ``.git`` and slashes dropped; the host in
  lower case), so ``git@github.com:acme/api.git`` and
  ``https://user:TOKEN@GitHub.com/acme/api`` give the same key, and no
  credential of the URL ever reaches the key;
* ``git:/ABS/PATH`` when ``origin`` is a local path or a ``file://`` URL;
* ``path:/ABS/REAL/PATH`` of the work tree otherwise (no origin, or not a git
  repository at all);
* a key longer than the 256 characters an owner field holds is replaced by its
  prefix and the SHA-256 of the whole (``git:sha256:HEX``).

The name (the work tree's folder name) is only for display.

Everything here reads files (``.git``, ``commondir``, ``config``) and never
spawns git: the capture hook must return within its budget. os.path rather
than pathlib for the same reason.
"""

from __future__ import annotations

import hashlib
import os
import re
import stat

TYPE_CHECKING = False
if TYPE_CHECKING:
    from pathlib import Path

#: The longest key kept as it is (the store's owner fields hold 256 characters).
MAX_KEY_LEN = 256
#: A git metadata file larger than this is not read (a config is a few hundred bytes).
MAX_GIT_FILE = 1 << 20

_URL_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*)://")
_PERCENT = re.compile(rb"%([0-9A-Fa-f]{2})")
#: scp-like syntax as git reads it: ``[user@]host:path`` with no slash before the colon.
_SCP = re.compile(r"^(?:[^@/]*@)?(\[[^\]]+\]|[^:/]+):(.*)$")
_SECTION = re.compile(r'^\s*\[\s*([A-Za-z0-9.-]+)(?:\s+"((?:[^"\\]|\\.)*)")?\s*\]\s*(.*)$')
_KEY = re.compile(r"^\s*([A-Za-z][A-Za-z0-9-]*)\s*(?:=(.*))?$")


# Plain slotted classes, not dataclasses, and no urllib: the capture hook imports this module,
# and those two imports cost it about 11 ms of its 100 ms budget.
class Project:
    """A working directory's project: ``key`` for scope checks, ``name`` for display."""

    __slots__ = ("key", "name")

    def __init__(self, key: str, name: str) -> None:
        self.key = key
        self.name = name

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Project) and (self.key, self.name) == (other.key, other.name)

    def __hash__(self) -> int:
        return hash((self.key, self.name))

    def __repr__(self) -> str:
        return f"Project(key={self.key!r}, name={self.name!r})"


class Repository:
    """Where a work tree's git metadata lives.

    ``gitdir`` is the repository directory of this work tree (``.git``, or the
    directory a worktree's or a submodule's ``.git`` file points at), and
    ``commondir`` the one holding ``config`` (a linked worktree shares its main
    repository's).
    """

    __slots__ = ("commondir", "gitdir", "top")

    def __init__(self, top: str, gitdir: str | None, commondir: str | None) -> None:
        self.top = top
        self.gitdir = gitdir
        self.commondir = commondir


def git_toplevel(cwd: str | Path) -> str | None:
    """The top-level directory of the git work tree holding ``cwd``, or None.

    Found by looking for ``.git`` (a directory, or the file a worktree or a
    submodule has) from ``cwd`` upwards, which is what ``git rev-parse
    --show-toplevel`` answers, without spawning git.
    """
    folder = os.path.realpath(os.path.expanduser(cwd))
    while True:
        if os.path.exists(os.path.join(folder, ".git")):
            return folder
        parent = os.path.dirname(folder)
        if parent == folder:
            return None
        folder = parent


def read_small(path: str) -> str | None:
    """The text of a regular file of at most MAX_GIT_FILE bytes, else None.

    Opened non-blocking and checked after opening: a repository is not
    trusted, and a FIFO or a device named ``config`` must not hang the hook.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError:
        return None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_size > MAX_GIT_FILE:
            return None
        return os.read(fd, MAX_GIT_FILE).decode("utf-8", errors="replace")
    except OSError:
        return None
    finally:
        os.close(fd)


def repository(top: str) -> Repository:
    """The git metadata of the work tree at ``top`` (which holds ``.git``)."""
    dotgit = os.path.join(top, ".git")
    if os.path.isdir(dotgit):
        gitdir: str | None = dotgit
    else:
        # A worktree's or a submodule's ``.git`` is a file: "gitdir: PATH" (relative to top).
        text = read_small(dotgit) or ""
        first = text.splitlines()[0] if text.strip() else ""
        gitdir = None
        if first.startswith("gitdir:") and first[7:].strip():
            gitdir = os.path.join(top, first[7:].strip())
    commondir = gitdir
    if gitdir is not None:
        pointer = (read_small(os.path.join(gitdir, "commondir")) or "").strip()
        if pointer:
            commondir = os.path.join(gitdir, pointer)
    return Repository(top=top,
                      gitdir=os.path.realpath(gitdir) if gitdir else None,
                      commondir=os.path.realpath(commondir) if commondir else None)


def _config_value(raw: str) -> str:
    """A git-config value as git reads it: quotes joined, escapes resolved, a comment cut."""
    out: list[str] = []
    quoted = False
    trailing = 0  # unquoted spaces at the end, dropped when the value ends
    i = 0
    while i < len(raw):
        ch = raw[i]
        if ch == "\\" and i + 1 < len(raw):
            out.append({"n": "\n", "t": "\t", "b": "\b"}.get(raw[i + 1], raw[i + 1]))
            trailing = 0
            i += 2
            continue
        if ch == '"':
            quoted = not quoted
        elif not quoted and ch in "#;":
            break
        else:
            out.append(ch)
            trailing = trailing + 1 if (not quoted and ch.isspace()) else 0
        i += 1
    value = "".join(out[:len(out) - trailing] if trailing else out)
    return value.lstrip()


def origin_url(config_text: str) -> str | None:
    """``remote.origin.url`` from a git config file's text (the first one, as fetch uses)."""
    section = ""
    for line in config_text.splitlines():
        header = _SECTION.match(line)
        if header:
            name, sub, rest = header.group(1).lower(), header.group(2), header.group(3)
            if sub is None and "." in name:  # the old form [remote.origin]
                name, _, sub = name.partition(".")
            section = f"{name}.{sub}" if sub is not None else name
            line = rest  # a key may follow the header on the same line
            if not line.strip():
                continue
        if section != "remote.origin":
            continue
        found = _KEY.match(line)
        if found and found.group(1).lower() == "url" and found.group(2) is not None:
            value = _config_value(found.group(2))
            if value:
                return value
    return None


def _clean_path(path: str) -> str:
    """A repository path without empty segments, a trailing ``.git`` or slashes."""
    parts = [p for p in path.split("/") if p and p != "."]
    joined = "/".join(parts)
    if joined.endswith(".git"):
        joined = joined[:-4].rstrip("/")
    return joined


def normalise_origin(url: str, top: str) -> str | None:
    """The key of a repository whose ``origin`` is ``url`` (None when it names nothing usable).

    Credentials, port, query and fragment are dropped: the key must never carry a
    token, and the https and ssh forms of one repository must give one key.
    """
    url = url.strip()
    if not url:
        return None
    scheme = _URL_SCHEME.match(url)
    if scheme:
        rest = url[scheme.end():]
        rest = rest.split("#", 1)[0].split("?", 1)[0]  # a query may carry a token too
        authority, slash, path = rest.partition("/")
        if scheme.group(1).lower() == "file":
            return _local_key(_unquote(slash + path), top)
        host = _host(authority)
        path = _clean_path(_unquote(path))
        return f"git:{host}/{path}" if host and path else None
    scp = _SCP.match(url)
    if scp and not os.path.isabs(url):
        host = scp.group(1).lower()
        path = _clean_path(scp.group(2))
        return f"git:{host}/{path}" if host and path else None
    return _local_key(url, top)


def _host(authority: str) -> str:
    """The host of a URL's authority in lower case, without user, password and port (the
    last ``@`` ends the user part: a password may hold one); an IPv6 host keeps its brackets."""
    hostport = authority.rpartition("@")[2]
    if hostport.startswith("["):
        return hostport[:hostport.find("]") + 1].lower() if "]" in hostport else ""
    return hostport.partition(":")[0].lower()


def _unquote(text: str) -> str:
    """Percent-escapes decoded as UTF-8 (``my%20api`` -> ``my api``)."""
    if "%" not in text:
        return text
    raw = _PERCENT.sub(lambda m: bytes([int(m.group(1), 16)]), text.encode("utf-8"))
    return raw.decode("utf-8", errors="replace")


def _local_key(path: str, top: str) -> str | None:
    """The key of a repository cloned from a local path (relative paths are the work tree's)."""
    if not path:
        return None
    full = os.path.normpath(os.path.join(top, os.path.expanduser(path)))
    cleaned = _clean_path(full)
    return f"git:/{cleaned}" if cleaned else None


def bounded(key: str) -> str:
    """``key`` as it is when it fits an owner field, else its prefix and its SHA-256."""
    if len(key) <= MAX_KEY_LEN:
        return key
    prefix = key.split(":", 1)[0]
    return f"{prefix}:sha256:{hashlib.sha256(key.encode('utf-8')).hexdigest()}"


def project_of(cwd: str | Path) -> Project:
    """``--project auto``: the key and the display name of the project holding ``cwd``."""
    here = os.path.realpath(os.path.expanduser(cwd))
    top = git_toplevel(here)
    folder = top if top is not None else here
    # The root directory has no name; say so rather than show an empty one.
    name = os.path.basename(folder) or folder
    if top is None:
        return Project(key=bounded(f"path:{folder}"), name=name)
    repo = repository(top)
    if repo.commondir is not None:
        url = origin_url(read_small(os.path.join(repo.commondir, "config")) or "")
        key = normalise_origin(url, top) if url else None
        if key is not None:
            return Project(key=bounded(key), name=name)
        if os.path.basename(repo.commondir) == ".git":
            # A linked worktree keys on its main work tree: one repository, one project.
            folder = os.path.dirname(repo.commondir)
    return Project(key=bounded(f"path:{folder}"), name=name)


def project_key(cwd: str | Path) -> str:
    """The project key ``--project auto`` and capture send as ``project`` (see the module doc)."""
    return project_of(cwd).key


def project_name(cwd: str | Path) -> str:
    """The display name of the project holding ``cwd``: its git top level's folder name,
    else ``cwd``'s own. Never a scope key: two repositories can share it."""
    return project_of(cwd).name


def default_user() -> str:
    """The user id when none is given: the login name, else ``uid-N`` (a container may
    run under a uid with no name)."""
    import getpass

    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return f"uid-{os.getuid()}"
