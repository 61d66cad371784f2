"""The capture spool: turns kept on disk while the daemon cannot take them.

The spool is a directory under the data directory
(``<data_dir>/spool/claude-code``, mode 0700). Each hook run that cannot
reach the daemon writes one file there: one memory.write params object per
line. The file is written under a temporary name, fsync'd, made 0600 and then
renamed into place (and the directory fsync'd), so a reader only ever sees
whole files, and no lock is needed between a hook writing and the daemon
replaying. The daemon replays every file at start and removes a file only
after its writes have committed; a hook that reaches the daemon also sends
the oldest spooled file, so a spool does not wait for the next restart.
The writes carry idempotency keys, so a file sent twice writes once.

Standard library only: the hook that writes here must start fast.
"""

from __future__ import annotations

import contextlib
import json
import os
import time

from memoryd import privatefs

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

SUFFIX = ".jsonl"
#: A file a hook has taken to send; renamed back (or removed) when it is done.
SENDING = ".sending"


def spool_dir(data_dir: str | os.PathLike[str], source: str = "claude-code") -> str:
    """Where ``source``'s spool files live."""
    return os.path.join(data_dir, "spool", source)


def _fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def append(folder: str, items: list[dict[str, Any]]) -> str:
    """Durably add one file holding ``items``; return its path."""
    privatefs.ensure_private_dir(folder, what="capture spool", own=True)
    stem = f"{time.time_ns():020d}-{os.getpid()}"
    tmp = os.path.join(folder, f".{stem}.tmp")
    final = os.path.join(folder, f"{stem}{SUFFIX}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        body = "".join(json.dumps(item, ensure_ascii=False) + "\n" for item in items).encode()
        os.write(fd, body)
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, final)
    _fsync_dir(folder)
    return final


def pending(folder: str) -> list[str]:
    """Spool files waiting (and ones a hook was sending when it died), oldest first."""
    try:
        names = os.listdir(folder)
    except FileNotFoundError:
        return []
    found = [n for n in names if n.endswith((SUFFIX, SUFFIX + SENDING)) and not n.startswith(".")]
    return [os.path.join(folder, n) for n in sorted(found)]


def read(path: str) -> tuple[list[dict[str, Any]], int]:
    """The items of a spool file, and how many lines could not be read."""
    items, bad = [], 0
    with open(path, encoding="utf-8", errors="replace") as fh:
        for line in fh:
            if not line.strip():
                continue
            try:
                item = json.loads(line)
            except ValueError:
                bad += 1
                continue
            if isinstance(item, dict):
                items.append(item)
            else:
                bad += 1
    return items, bad


def claim(path: str) -> str | None:
    """Take a waiting file to send it (None when another process took it first)."""
    if path.endswith(SENDING):
        return None
    taken = path + SENDING
    try:
        os.rename(path, taken)
    except FileNotFoundError:
        return None
    return taken


def release(taken: str) -> None:
    """Put back a file that could not be sent."""
    with contextlib.suppress(FileNotFoundError):
        os.rename(taken, taken[: -len(SENDING)])


def remove(path: str) -> None:
    """Drop a file whose writes have committed."""
    try:
        os.unlink(path)
    except FileNotFoundError:
        return
    _fsync_dir(os.path.dirname(path))
