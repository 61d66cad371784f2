"""Entities: the configured type vocabulary, a gazetteer of well-known names,
normalisation and aliases, and deterministic finders.

Canonicalisation meets surface forms in three steps: exact name, then the
normalised key (case, punctuation, a trailing version and known aliases:
"PostgreSQL", "Postgres" and "postgres 15" all become ``postgres``), then,
in the extract pass, embedding similarity of names of the same type.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from memoryd.text import values

#: Normalised alias -> canonical key.
ALIASES = {
    "postgresql": "postgres", "pg": "postgres", "psql": "postgres", "k8s": "kubernetes",
    "kube": "kubernetes", "js": "javascript", "ts": "typescript", "golang": "go", "py": "python",
    "python3": "python", "node.js": "node", "nodejs": "node", "gh": "github", "gha": "github actions",
    "mongo": "mongodb", "es": "elasticsearch", "tf": "terraform", "mariadb": "mariadb",
    "reactjs": "react", "react.js": "react", "vue.js": "vue", "vuejs": "vue", "dotnet": ".net",
}

#: Well-known names and their types (keys are normalised).
GAZETTEER = {
    "postgres": "database", "mysql": "database", "mariadb": "database", "sqlite": "database",
    "redis": "database", "mongodb": "database", "elasticsearch": "database", "clickhouse": "database",
    "cassandra": "database", "dynamodb": "database", "kafka": "service", "rabbitmq": "service",
    "nginx": "service", "kubernetes": "tool", "docker": "tool", "terraform": "tool", "ansible": "tool",
    "jenkins": "tool", "github actions": "tool", "gitlab ci": "tool", "git": "tool", "make": "tool",
    "pytest": "tool", "ruff": "tool", "mypy": "tool", "npm": "tool", "pnpm": "tool", "yarn": "tool",
    "vite": "tool", "webpack": "tool", "helm": "tool", "grafana": "tool", "prometheus": "tool",
    "sentry": "tool", "datadog": "tool", "loki": "tool", "celery": "library", "sqlalchemy": "library",
    "django": "library", "flask": "library", "fastapi": "library", "react": "library", "vue": "library",
    "numpy": "library", "pandas": "library", "torch": "library", "alembic": "library",
    "python": "language", "go": "language", "rust": "language", "javascript": "language",
    "typescript": "language", "java": "language", "kotlin": "language", "ruby": "language",
    "node": "tool", "c++": "language", "sql": "language", "bash": "language", "github": "organization",
    "gitlab": "organization", "aws": "organization", "gcp": "organization", "azure": "organization",
    "s3": "service", "ec2": "service", "lambda": "service", "vault": "tool", "consul": "tool",
}

_PUNCT = re.compile(r"[\s\"'`()\[\]{},;]+")
_TRAILING_VERSION = re.compile(r"[\s-]*v?\d+(\.\d+)*$")


def normalise(name: str) -> str:
    """The canonical key of a surface form."""
    key = _PUNCT.sub(" ", name.casefold()).strip()
    stripped = _TRAILING_VERSION.sub("", key).strip()
    if stripped and stripped != key and (stripped in ALIASES or stripped in GAZETTEER):
        key = stripped
    return ALIASES.get(key, key)


@dataclass(frozen=True)
class Found:
    name: str  # as it appears in the text
    type: str


_VALUE_TYPES = {"url": "url", "host_port": "host", "path": "file", "version": "version", "issue": "issue"}
_WORD = re.compile(r"[A-Za-z][\w.+#-]*[\w+#]|[A-Za-z]")


def find_deterministic(text: str) -> list[Found]:
    """Entities a regex or the gazetteer finds reliably."""
    out: list[Found] = []
    taken: list[tuple[int, int]] = []
    for v in values.extract(text):
        taken.append((v.start, v.end))
        if v.kind in _VALUE_TYPES:
            out.append(Found(v.text, _VALUE_TYPES[v.kind]))
        elif v.kind == "identifier" and " " in v.text:
            out.append(Found(v.text, "command"))
    words = [m for m in _WORD.finditer(text)]
    for i, m in enumerate(words):
        if any(s <= m.start() < e for s, e in taken):
            continue  # inside a URL, path or command already found
        for span in (2, 1):
            if i + span > len(words):
                continue
            surface = text[m.start():words[i + span - 1].end()]
            key = normalise(surface)
            if key in GAZETTEER:
                out.append(Found(surface, GAZETTEER[key]))
                break
    seen: set[tuple[str, str]] = set()
    unique = []
    for f in out:
        if (f.name.lower(), f.type) not in seen:
            seen.add((f.name.lower(), f.type))
            unique.append(f)
    return unique
