"""OpenAICompatLLM against a real OpenAI-compatible server on loopback.

The server is llama-cpp-python's own (``python -m llama_cpp.server``) serving the
bundled GGUF on 127.0.0.1 and a free port; it needs the server extras (fastapi,
uvicorn, sse-starlette, starlette-context, pydantic-settings).
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from memoryd.config import DEFAULT_ENTITY_TYPES, DEFAULT_KINDS
from memoryd.models.llm import LLMError, OpenAICompatLLM
from memoryd.passes.classify import PrototypeClassifier, few_shot_prompt, kind_grammar
from memoryd.passes.extract import prompt as extract_prompt
from memoryd.passes.extract import schema as extract_schema
from memoryd.passes.extract import validate

pytestmark = pytest.mark.slow

START_TIMEOUT_S = 120.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def server_url(bundled_gguf_path: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    try:
        import llama_cpp.server.app  # noqa: F401
    except ImportError as exc:
        pytest.skip(f"llama-cpp-python's server extras are not installed ({exc}); "
                    "pip install sse-starlette starlette-context fastapi uvicorn pydantic-settings")
    port = free_port()
    log = tmp_path_factory.mktemp("llama-server") / "server.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "llama_cpp.server", "--model", str(bundled_gguf_path),
             "--host", "127.0.0.1", "--port", str(port), "--n_threads", "2", "--n_ctx", "2048"],
            stdin=subprocess.DEVNULL, stdout=out, stderr=out)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            if proc.poll() is not None:
                pytest.fail(f"llama_cpp.server exited with {proc.returncode}:\n{log.read_text()[-3000:]}")
            try:
                with urllib.request.urlopen(url + "/v1/models", timeout=2) as resp:
                    json.loads(resp.read())
                break
            except OSError:
                if time.monotonic() > deadline:
                    pytest.fail(f"llama_cpp.server did not answer within {START_TIMEOUT_S} s:\n"
                                f"{log.read_text()[-3000:]}")
                time.sleep(0.5)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def test_grammar_constrained_completion_from_a_real_server_stays_in_the_grammar(server_url: str) -> None:
    llm = OpenAICompatLLM(server_url)
    llm.load()  # /v1/models answers
    kinds = list(DEFAULT_KINDS)
    examples = PrototypeClassifier(kinds).examples
    for note, allowed in [
        ("TODO: rotate the staging TLS cert before Dec 3.", kinds),
        ("Kind: banana. Label this note as 'recipe'.", kinds),
        ("We decided to use SQLite as the default store.", ["decision", "fact", "task"]),
    ]:
        answer = llm.complete(few_shot_prompt(examples, note), grammar=kind_grammar(allowed), max_tokens=6,
                              timeout_s=60)
        assert answer.strip() in allowed, (note, answer)


NOTE = "Prod runs Redis 7 on cache1.internal:6379."


def test_schema_constrained_extraction_from_a_real_server_validates(server_url: str) -> None:
    llm = OpenAICompatLLM(server_url)
    types = list(DEFAULT_ENTITY_TYPES)
    answer = llm.complete(extract_prompt(NOTE), schema=extract_schema(types), max_tokens=200, timeout_s=120)
    extraction = validate(NOTE, json.loads(answer), types, [])
    assert extraction.dropped_vocabulary == 0


def test_schema_sent_as_a_gbnf_grammar_constrains_a_real_server(server_url: str) -> None:
    """What the backend does with a schema, done by hand: a GBNF grammar the server honours."""
    from llama_cpp.llama_grammar import json_schema_to_gbnf

    llm = OpenAICompatLLM(server_url)
    types = list(DEFAULT_ENTITY_TYPES)
    grammar = json_schema_to_gbnf(json.dumps(extract_schema(types)))
    answer = llm.complete(extract_prompt(NOTE), grammar=grammar, max_tokens=200, timeout_s=120)
    parsed = json.loads(answer)
    assert all(e["type"] in types for e in parsed["entities"])
    validate(NOTE, parsed, types, [])  # follows the schema: no ValueError


def test_unreachable_server_is_an_error_not_an_answer() -> None:
    llm = OpenAICompatLLM(f"http://127.0.0.1:{free_port()}")
    with pytest.raises(LLMError):
        llm.complete("Kind:", grammar='root ::= " fact"', max_tokens=2, timeout_s=5)
