"""The docs say what the configuration code does.

* docs/operations.md's table of every key is generated from the schema
  (:func:`memoryd.config.docs_table`); the committed region must equal it.
  Regenerate it with::

      .venv/bin/python -m memoryd.config --docs-table --write docs/operations.md

* The table's defaults, read back from the committed markdown as TOML, equal
  the values of a default :class:`Config` (so the renderer cannot drift from
  the values either).
* The prose of every page (README.md, docs/*.md) that names a key with a
  number, as in "`classify_margin` (0.05)" or "(`job_lease_s`, 300 s)",
  states that key's default, converted to the key's unit.
"""

from __future__ import annotations

import math
import re
import tomllib
from dataclasses import fields
from pathlib import Path
from typing import Any

import click
import pytest

from memoryd.config import DOCS_TABLE_END, DOCS_TABLE_START, ENV_KEYS, RUN_FLAGS, Config, docs_table
from memoryd.errors import ERROR_CODES

ROOT = Path(__file__).resolve().parents[2]
OPERATIONS = ROOT / "docs" / "operations.md"
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
REGENERATE = "regenerate it with `.venv/bin/python -m memoryd.config --docs-table --write docs/operations.md`"


def operations_text() -> str:
    return OPERATIONS.read_text(encoding="utf-8")


def table_region(text: str) -> str:
    assert DOCS_TABLE_START in text and DOCS_TABLE_END in text, (
        f"the config-table markers are missing; {REGENERATE}")
    start = text.index(DOCS_TABLE_START)
    return text[start: text.index(DOCS_TABLE_END, start) + len(DOCS_TABLE_END)]


def test_every_config_key_is_named_in_operations_doc() -> None:
    text = operations_text()
    names = [f.name for f in fields(Config)]
    assert "data_dir" in names  # positive control: the dataclass is what we think it is
    missing = [name for name in names if f"`{name}`" not in text]
    assert not missing, f"docs/operations.md does not document config key(s) {missing}; {REGENERATE}"


def test_config_table_in_operations_doc_is_the_generated_one() -> None:
    assert table_region(operations_text()) == docs_table(), f"the config table is out of date; {REGENERATE}"


def documented_defaults(region: str) -> dict[str, Any]:
    """key -> default, parsed from the markdown rows of the committed table as TOML values."""
    out = {}
    for line in region.splitlines():
        cells = [c.strip() for c in line.split(" | ")]
        if not line.startswith("| `") or len(cells) < 4:
            continue
        key, default = cells[0].removeprefix("| ").strip("`"), cells[1].strip("`")
        out[key] = tomllib.loads(f"v = {default}")["v"]
    return out


def test_documented_defaults_read_back_as_the_code_defaults() -> None:
    documented = documented_defaults(table_region(operations_text()))
    assert documented["classify_margin"] == 0.05  # positive control, a literal from the issue
    assert documented["llm_timeout_s"] == 120.0 and documented["reflect_subject_jaccard"] == 0.0
    code = Config().as_dict()
    assert set(documented) == set(code)
    wrong = {k: (documented[k], code[k]) for k in code if documented[k] != code[k]
             or type(documented[k]) is not type(code[k])}
    assert not wrong, f"(docs, code) defaults differ: {wrong}; {REGENERATE}"


def test_run_flags_in_the_table_are_the_options_memoryd_run_declares() -> None:
    from memoryd.cli.daemon import run

    declared = {}
    keys = {f.name for f in fields(Config)}
    for param in run.params:
        if isinstance(param, click.Option) and param.name:
            key = next((k for k in (param.name, param.name.removesuffix("_path"), param.name + "_path")
                        if k in keys), None)
            if key:
                declared[key] = param.opts[0]
    assert declared["data_dir"] == "--data-dir"  # positive control
    assert declared == RUN_FLAGS


def test_every_config_environment_variable_is_documented() -> None:
    text = operations_text()
    wanted = [*ENV_KEYS, "MEMORYD_CONFIG"]
    missing = [env for env in wanted if env not in text]
    assert not missing, f"docs/operations.md does not mention {missing}"


def test_every_error_code_has_a_troubleshooting_entry() -> None:
    headings = [line for line in operations_text().splitlines() if line.startswith("### ")]
    assert headings, "docs/operations.md has no ### headings"
    missing = [code for code in ERROR_CODES if not any(h.startswith(f"### {code} ") for h in headings)]
    assert not missing, (
        f"docs/operations.md has no troubleshooting entry (a '### <code> ...' heading) for {missing}"
    )


# -- the prose states the defaults ------------------------------------------------------------

#: "`key` (N unit" or "`key`, N unit": a key named with its value.
_MENTION = re.compile(
    r"`(?P<key>[a-z][a-z0-9_]*)`\s*(?:\(|,\s*)(?P<num>\d[\d,]*(?:\.\d+)?)"
    r"(?:\s*(?P<unit>ms|s|min|h|days?|KiB|MiB|GiB|bytes|%)(?![\w]))?")
#: Each unit in seconds, bytes, percent or a bare count.
_UNIT_VALUE = {"ms": 0.001, "s": 1.0, "min": 60.0, "h": 3600.0, "day": 86400.0, "days": 86400.0,
               "bytes": 1.0, "KiB": 1024.0, "MiB": 1024.0**2, "GiB": 1024.0**3, "%": 1.0}
#: A key's unit, by the suffix of its name (in the same base as _UNIT_VALUE).
_KEY_UNIT = {"_ms": 0.001, "_s": 1.0, "_days": 86400.0, "_bytes": 1.0, "_mb": 1024.0**2, "_percent": 1.0}


def prose(text: str) -> str:
    """A page without its fenced code blocks and without the generated config table."""
    if DOCS_TABLE_START in text:
        start = text.index(DOCS_TABLE_START)
        text = text[:start] + text[text.index(DOCS_TABLE_END, start) + len(DOCS_TABLE_END):]
    return re.sub(r"^```.*?^```", "", text, flags=re.S | re.M)


def stated_values(text: str) -> list[tuple[str, float]]:
    """(key, value in the key's own unit) for every config key the text names with a number."""
    keys = {f.name for f in fields(Config)}
    out = []
    for m in _MENTION.finditer(text):
        key = m["key"]
        if key not in keys:
            continue
        number = float(m["num"].replace(",", ""))
        key_unit = next((u for suffix, u in _KEY_UNIT.items() if key.endswith(suffix)), None)
        if m["unit"] is None:
            out.append((key, number))
        elif key_unit is None:
            out.append((key, math.nan))  # a unit on a unitless key: never equal, so reported
        else:
            out.append((key, number * _UNIT_VALUE[m["unit"]] / key_unit))
    return out


@pytest.mark.parametrize(("sentence", "expected"), [
    ("the next by at least `classify_margin` (0.03), it is taken", [("classify_margin", 0.03)]),
    ("A completion may take `llm_timeout_s` (60 s).", [("llm_timeout_s", 60.0)]),
    ("Every `retention_interval_s` (10 min) the retention pass", [("retention_interval_s", 600.0)]),
    ("until `lease_until` (`job_lease_s`, 300 s)", [("job_lease_s", 300.0)]),
    ("word overlap ≥ `reflect_subject_jaccard`, 0.8), with", [("reflect_subject_jaccard", 0.8)]),
    ("kept for `idempotency_ttl_s` (172,800 s = 48 h by default", [("idempotency_ttl_s", 172800.0)]),
    ("older than `session_ttl_s` (24 h), up to `retention_batch` (500) rows",
     [("session_ttl_s", 86400.0), ("retention_batch", 500.0)]),
    ("at most `max_content_bytes` (65,536) UTF-8 bytes", [("max_content_bytes", 65536.0)]),
    ("the frame over `max_frame_bytes` (1 MiB).", [("max_frame_bytes", 1048576.0)]),
    ("the runner waits `runner_gather_s` (50 ms) before", [("runner_gather_s", 0.05)]),
    ("`busy_timeout_ms` (5 s) sets the wait", [("busy_timeout_ms", 5000.0)]),
    ("halves every `decay_half_life_days` (30 days)", [("decay_half_life_days", 30.0)]),
    ("`model_threads` (2) threads; `nice`, and `kinds` (a list)", [("model_threads", 2.0)]),
    ("`read_threads` (4 s)", [("read_threads", math.nan)]),
    ("`ttl_s` (60 s) is a write parameter, not a config key", []),
])
def test_stated_values_reads_keys_numbers_and_units(sentence: str, expected: list[tuple[str, float]]) -> None:
    got = stated_values(sentence)
    assert [k for k, _ in got] == [k for k, _ in expected]
    for (_, value), (_, wanted) in zip(got, expected, strict=True):
        assert (math.isnan(value) and math.isnan(wanted)) or math.isclose(value, wanted)


def test_defaults_stated_in_the_prose_are_the_code_defaults() -> None:
    defaults = Config().as_dict()
    found: dict[str, list[tuple[str, float]]] = {}
    wrong = []
    for page in PAGES:
        for key, value in stated_values(prose(page.read_text(encoding="utf-8"))):
            found.setdefault(page.name, []).append((key, value))
            if not math.isclose(value, float(defaults[key]), rel_tol=1e-9):
                wrong.append(f"{page.relative_to(ROOT)}: `{key}` stated as {value:g}, "
                             f"the code's default is {defaults[key]!r}")
    # Positive control: the parser finds the keys issue 11 named, and many more.
    named = {key for key, _ in found.get("operations.md", [])}
    assert {"classify_margin", "llm_timeout_s", "reflect_subject_jaccard"} <= named, named
    assert sum(len(v) for v in found.values()) >= 25, found
    assert not wrong, "\n".join(wrong)
