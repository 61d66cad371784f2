"""CPU burners: busy-looping processes, killed when the block ends.

They are started through a shell that exits at once, so they are nobody's
children here: a HostProbe in the test process counts them as other programs,
as it would count an editor's build, not as memoryd's own workers.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager

BURN = "import time\nend = time.time() + 600\nwhile time.time() < end:\n    pass\n"


@contextmanager
def cpu_burners(n: int) -> Iterator[list[int]]:
    """Start ``n`` burners (each gives up after 600 s on its own); yields their pids."""
    line = f"{shlex.quote(sys.executable)} -c {shlex.quote(BURN)} >/dev/null 2>&1 & echo $!"
    pids = [int(subprocess.run(["sh", "-c", line], check=True, capture_output=True, text=True).stdout)
            for _ in range(n)]
    try:
        yield pids
    finally:
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
