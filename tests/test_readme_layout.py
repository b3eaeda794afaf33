"""The README's layout table names every folder of the package, and only folders that exist."""
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_layout_table_matches_the_tree():
    readme = (ROOT / "README.md").read_text()
    section = readme[readme.index("## Layout"):]
    section = section[:section.index("\n## ", 1)] if "\n## " in section[1:] else section
    listed = {m.rstrip("/") for m in re.findall(r"^\| `([\w/]+)/?` \|", section, re.M)}
    folders = {str(p.parent.relative_to(ROOT)) for p in (ROOT / "snipjit").rglob("__init__.py")}
    # a folder is listed itself or through a parent row (snipjit/snippets covers snippets/lowered)
    covered = {f for f in folders if any(f == row or f.startswith(row + "/") for row in listed)}
    assert covered == folders - {"snipjit", "snipjit/runtime"}, sorted(folders - covered)
    assert {row for row in listed if row.startswith("snipjit")} <= folders
