"""docs/architecture.md's map says what each folder of src/memoryd may import; the code holds
to it (a folder importing one the map does not allow fails here, naming the module)."""

from __future__ import annotations

import re

from tests.unit.test_import_cycles import ROOT, _modules, import_graph

PACKAGE = ROOT / "src" / "memoryd"
ROW = re.compile(r"^\| `([a-z_]+)/` \| [^|]+ \| ([^|]+) \|$")


def _folder(module: str) -> str:
    """The folder a module lives in, or "top" for the package and its top-level modules."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and (PACKAGE / parts[1]).is_dir() else "top"


def documented() -> dict[str, set[str]]:
    allowed: dict[str, set[str]] = {}
    for line in (ROOT / "docs" / "architecture.md").read_text().splitlines():
        match = ROW.match(line)
        if match:
            names = {n.strip() for n in match.group(2).split(",")} - {"(none)"}
            allowed[match.group(1)] = names
    return allowed


def test_every_folder_is_on_the_map_and_imports_only_what_it_allows() -> None:
    allowed = documented()
    folders = {p.name for p in PACKAGE.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    assert folders == set(allowed), f"folders missing from the map, or gone: {folders ^ set(allowed)}"
    wrong = []
    for module, deps in import_graph(_modules(PACKAGE, "memoryd")).items():
        here = _folder(module)
        if here == "top":
            continue
        for dep in deps:
            there = _folder(dep)
            if there != here and there not in allowed[here] and "every folder" not in allowed[here]:
                wrong.append(f"{module} imports {dep} ({here}/ may import {sorted(allowed[here])})")
    assert not wrong, "\n".join(wrong)
