"""The documentation site builds strictly, and the README is a first page that points into it."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
sys.path.insert(0, str(ROOT / "benchmarks"))
import plots  # noqa: E402


@pytest.mark.integration
def test_the_site_builds_with_no_broken_link_or_missing_page(tmp_path):
    # strict: a nav entry without its page, a link to a missing page or anchor fails the build
    built = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--config-file",
         str(ROOT / "mkdocs.yml"), "--site-dir", str(tmp_path / "site")],
        cwd=ROOT, capture_output=True, text=True, timeout=600,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})
    assert built.returncode == 0, built.stderr[-4000:]
    assert (tmp_path / "site" / "reference" / "cli" / "index.html").exists()
    assert (tmp_path / "site" / "search" / "search_index.json").exists()


def test_the_readme_is_a_first_page():
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) <= 200
    assert re.search(r"^make run\b", readme, re.M) and re.search(r"^make test\b", readme, re.M)
    assert "docs/images/web-search.png" in readme
    for target in re.findall(r"\]\(([^)#]+)\)", readme):
        if "://" not in target:
            assert (ROOT / target).exists(), target


def test_no_page_names_a_path_of_the_machine_it_was_written_on():
    pages = [ROOT / "README.md", ROOT / "CHANGELOG.md", *DOCS.rglob("*.md")]
    for page in pages:
        text = page.read_text()
        for machine_path in ("/work/", "/tmp/"):
            assert machine_path not in text, f"{page.relative_to(ROOT)} names {machine_path}"


def test_the_architecture_page_names_every_layer_of_the_import_contract():
    contracts = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    layers = next(c for c in contracts["contracts"] if c["type"] == "layers")["layers"]
    page = (DOCS / "explanation" / "architecture.md").read_text()
    for layer in layers:
        for module in re.split(r"[|:]", layer):
            name = module.strip().removeprefix("psirag_kb.")
            if name != "__main__":
                assert name in page, name


def test_the_benchmark_plots_are_drawn_from_the_recorded_figures():
    figures = plots.json.loads(plots.FIGURES.read_text())
    for name, figure in figures.items():
        if not name.startswith("_"):
            image = DOCS / "images" / f"bench-{name}.svg"
            assert image.read_text() == plots.chart(figure), (
                f"{image.name} is stale: python benchmarks/plots.py")
            assert f"images/bench-{name}.svg" in (DOCS / "benchmarks" / "index.md").read_text()
