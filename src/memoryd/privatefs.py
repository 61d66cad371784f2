"""Private files and directories: what memoryd creates, only its user can read.

The rules, in one place (docs/security.md):

- Every directory memoryd creates is 0700, each missing component of it, whatever
  the umask: ``os.makedirs(path, mode=0o700)`` gives the mode to the last
  component only, and the umask masks even that (:func:`make_dirs`).
- Every file memoryd creates is 0600. Each entry point sets the umask to 077
  (:func:`private_umask`), so the files SQLite (database, WAL, shared memory),
  a logger or a library creates are private too; files memoryd writes itself
  are opened 0600 and, when they existed looser and are the user's, set to 0600
  (:func:`open_private`, :func:`write_private`).
- A directory that is memoryd's own (the data directory; the socket directories
  memoryd names itself) and exists looser is tightened to 0700 when the user
  owns it and it is not a shared directory (sticky bit), else refused with the
  command that fixes it (:func:`judge`, :func:`ensure_private_dir`).
- A directory memoryd neither created nor owns (the folder a user's ``--socket``
  path is in) is never chmod-ed: it is used as it is when only its owner can
  write it, and refused when others can.

Standard library modules the capture hook loads anyway, and nothing more (not
dataclasses, not typing, not memoryd.errors: 25 ms of the hook's 100 ms
budget): the hook, which must start fast, creates its folders through it.
"""

from __future__ import annotations

import os
import stat

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import IO

    StrPath = str | os.PathLike[str]

#: The umask every memoryd process runs with: group and others get no bits.
PRIVATE_UMASK = 0o077
DIR_MODE = 0o700
FILE_MODE = 0o600

OK, TIGHTEN, REFUSE = "ok", "tighten", "refuse"


class NotPrivate(Exception):
    """A directory memoryd needs is open to other users and is not memoryd's to fix.

    Its message says what is wrong and the fix. The daemon raises it on as a
    MemorydError of its own (SocketDirUnsafe, DataDirUnsafe), which `memoryd run`
    turns into exit 2.
    """

    def __init__(self, message: str):
        super().__init__(message)
        self.message = message


def private_umask() -> int:
    """Set the process umask to 077 (inherited by every child); return the old one."""
    return os.umask(PRIVATE_UMASK)


def make_dirs(path: StrPath) -> list[str]:
    """Create ``path`` and each missing parent, every one mode 0700; return those created.

    Components that exist are left as they are (memoryd did not create them).
    The mode is set with chmod after mkdir, since the umask masks mkdir's mode.
    """
    target = os.path.abspath(os.fspath(path))
    missing: list[str] = []
    probe = target
    while not os.path.isdir(probe):
        missing.append(probe)
        parent = os.path.dirname(probe)
        if parent == probe:
            break
        probe = parent
    created = []
    for component in reversed(missing):
        try:
            os.mkdir(component, DIR_MODE)
        except FileExistsError:
            if os.path.isdir(component):
                continue  # another process made it first: it is not ours to chmod
            raise
        os.chmod(component, DIR_MODE)
        created.append(component)
    return created


def mode_text(mode: int) -> str:
    """A mode as ``ls`` users read it: ``0755``, ``1777``."""
    return f"{mode:04o}"


class Verdict:
    """What to do with one existing directory: ``ok``, ``tighten`` (to 0700) or ``refuse``.

    ``problem`` says what is wrong and ``fix`` what fixes it (both empty when ok);
    ``mode`` is the directory's mode as found.
    """

    __slots__ = ("action", "fix", "mode", "problem")

    def __init__(self, action: str, mode: int, problem: str = "", fix: str = ""):
        self.action = action
        self.mode = mode
        self.problem = problem
        self.fix = fix

    def __repr__(self) -> str:
        return f"Verdict({self.action!r}, {mode_text(self.mode)}, {self.problem!r}, {self.fix!r})"


def judge(path: StrPath, st: os.stat_result, *, what: str, own: bool, uid: int | None = None) -> Verdict:
    """Decide what to do with the existing directory ``path`` (its ``stat``).

    ``own``: the directory is memoryd's by name (the data directory, a socket
    directory memoryd chose), so a looser mode is memoryd's to tighten. A
    directory memoryd did not create is never chmod-ed; a shared one (sticky
    bit, such as /tmp) and one another user owns never either.
    """
    uid = os.getuid() if uid is None else uid
    mode = stat.S_IMODE(st.st_mode)
    if not mode & 0o077:
        return Verdict(OK, mode)
    shown = mode_text(mode)
    if mode & stat.S_ISVTX:
        return Verdict(REFUSE, mode,
                       f"{what} {path} is a shared directory (mode {shown}, sticky bit): other users "
                       "can create files in it, and memoryd never changes its mode",
                       f"use a directory of its own inside it, for example {os.path.join(path, 'memoryd')}/, "
                       "which memoryd creates 0700")
    if st.st_uid != uid:
        return Verdict(REFUSE, mode,
                       f"{what} {path} is accessible to other users (mode {shown}) and owned by uid "
                       f"{st.st_uid}, not by this user (uid {uid})",
                       f"choose a directory of your own, or have its owner run `chmod 700 {path}`")
    if own:
        return Verdict(TIGHTEN, mode,
                       f"{what} {path} is accessible to other users (mode {shown})",
                       f"chmod 700 {path}")
    if mode & 0o022:
        return Verdict(REFUSE, mode,
                       f"{what} {path} is writable by other users (mode {shown}); memoryd did not create "
                       "it and never changes the mode of a directory it did not create",
                       f"use a directory of its own, for example {os.path.join(path, 'memoryd')}/ "
                       f"(memoryd creates it 0700), or run `chmod 700 {path}` if it is yours alone")
    # Readable by others but not writable: they can list it, never replace what memoryd puts
    # there, and a 0600 file (or socket) in it stays closed to them. The user's mode stands.
    return Verdict(OK, mode)


def ensure_private_dir(path: StrPath, *, what: str, own: bool) -> Verdict:
    """Create ``path`` (every missing component 0700), or judge the existing one and act.

    Returns the verdict acted on: ``tighten`` means it was looser and is now 0700
    (the caller logs it). Raises :class:`NotPrivate` with the fix when refused.
    """
    if make_dirs(path):
        return Verdict(OK, DIR_MODE)
    verdict = judge(path, os.stat(path), what=what, own=own)
    if verdict.action == REFUSE:
        raise NotPrivate(f"{verdict.problem}; {verdict.fix}")
    if verdict.action == TIGHTEN:
        os.chmod(path, DIR_MODE)
    return verdict


def tighten_file(path: StrPath) -> int | None:
    """Set an existing file the user owns to 0600 when it is looser; return its old mode if changed.

    A missing file, or one another user owns, is left alone (None).
    """
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return None
    mode = stat.S_IMODE(st.st_mode)
    if not stat.S_ISREG(st.st_mode) or not mode & 0o077 or st.st_uid != os.getuid():
        return None
    os.chmod(path, FILE_MODE)
    return mode


def open_private(path: StrPath, flags: int) -> int:
    """``os.open`` a file that is 0600 from its first byte (also one that existed looser)."""
    fd = os.open(path, flags | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), FILE_MODE)
    try:
        st = os.fstat(fd)
        # Only a regular file: `-o /dev/stdout` must not chmod the user's terminal.
        if stat.S_ISREG(st.st_mode) and stat.S_IMODE(st.st_mode) & 0o077 and st.st_uid == os.getuid():
            os.fchmod(fd, FILE_MODE)
    except BaseException:
        os.close(fd)
        raise
    return fd


def open_text(path: StrPath, mode: str = "w") -> IO[str]:
    """A text file opened for writing (``w`` truncates, ``a`` appends), 0600 as :func:`open_private`."""
    flags = os.O_WRONLY | (os.O_TRUNC if mode == "w" else os.O_APPEND)
    return os.fdopen(open_private(path, flags), mode, encoding="utf-8")


def write_private(path: StrPath, text: str) -> None:
    """Write ``text`` to ``path``, mode 0600 from the first byte, and fsync it."""
    fd = open_private(path, os.O_WRONLY | os.O_TRUNC)
    try:
        view = memoryview(text.encode("utf-8"))
        while view:
            view = view[os.write(fd, view):]
        os.fsync(fd)
    finally:
        os.close(fd)
