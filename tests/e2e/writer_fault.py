"""Run ``memoryd`` unchanged, with a way for a test to kill its writer thread from outside.

Usage: ``python writer_fault.py TRIGGER_FILE run --data-dir ...`` (everything after
TRIGGER_FILE is ``memoryd``'s own command line).

No client request and no store condition can stop the group committer's writer
thread: ``GroupCommitter._commit`` turns every ``Exception`` of a commit into the
failed answers of that batch and the thread goes on (service/committer.py). Only
a ``BaseException`` or an error outside the commit ends it, which is what this
launcher delivers: when TRIGGER_FILE appears, a watcher thread raises
:class:`InjectedWriterFault` asynchronously in the thread named
``memoryd-writer`` (``PyThreadState_SetAsyncExc``, the mechanism CPython uses for
KeyboardInterrupt), and then writes ``TRIGGER_FILE.done`` with the number of
threads it reached. The exception lands the next time that thread runs Python
code, that is, when the next write wakes it. The daemon's code is not patched:
what runs after that is its own crash handling.
"""

from __future__ import annotations

import ctypes
import runpy
import sys
import threading
import time
from pathlib import Path

WRITER_THREAD = "memoryd-writer"


class InjectedWriterFault(BaseException):
    """Raised in the writer thread by a test; never raised by memoryd itself."""


def _inject_when(trigger: Path) -> None:
    while not trigger.exists():
        time.sleep(0.02)
    reached = 0
    for thread in threading.enumerate():
        if thread.name == WRITER_THREAD and thread.ident is not None:
            reached += ctypes.pythonapi.PyThreadState_SetAsyncExc(
                ctypes.c_ulong(thread.ident), ctypes.py_object(InjectedWriterFault))
    trigger.with_name(trigger.name + ".done").write_text(str(reached), encoding="utf-8")


def main() -> None:
    trigger = Path(sys.argv[1])
    threading.Thread(target=_inject_when, args=(trigger,), name="test-fault-injector", daemon=True).start()
    sys.argv = ["memoryd", *sys.argv[2:]]
    runpy.run_module("memoryd", run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
