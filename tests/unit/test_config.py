"""Config parsing: defaults, strict validation, relative paths."""

from __future__ import annotations

from pathlib import Path

import pytest

from psirag_kb.config import Config, load_config, parse_config
from psirag_kb.errors import ConfigError

REPO = Path(__file__).resolve().parents[2]


def test_repository_config_is_valid_and_matches_defaults():
    config = load_config(REPO / "config.toml")
    defaults = Config()
    for section in ("ingest", "embedding", "tree", "retrieval", "llm", "api"):
        assert getattr(config, section) == getattr(defaults, section), section
    assert config.data_dir == REPO / ".psirag-data"


def test_unknown_key_is_named(tmp_path):
    with pytest.raises(ConfigError, match=r"unknown setting \[tree\] max_kids"):
        parse_config({"tree": {"max_kids": 3}}, tmp_path)
    with pytest.raises(ConfigError, match=r"unknown section \[trees\]"):
        parse_config({"trees": {}}, tmp_path)


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"tree": {"max_children": "40"}}, "must be an integer"),
        ({"tree": {"max_children": 2}}, "at least 3"),
        ({"tree": {"pair_mode": "fast"}}, "must be one of"),
        ({"ingest": {"include_hidden": 1}}, "true or false"),
        ({"ingest": {"follow_external_links": "yes"}}, "true or false"),
        ({"watch": {"folders": "docs"}}, "list of path strings"),
        ({"retrieval": {"k": 0}}, "must be positive"),
        ({"api": {"forwarded_allow": ["nginx.local"]}}, "is not an address or network"),
        ({"api": {"forwarded_allow": ["*"]}}, "is not an address or network"),
        ({"auth": {"proxy": {"trusted": ["10.0.0.0/33"]}}}, "is not an address or network"),
    ],
)
def test_bad_values_are_explained(tmp_path, data, message):
    with pytest.raises(ConfigError, match=message):
        parse_config(data, tmp_path)


def test_external_links_are_not_followed_unless_enabled(tmp_path):
    assert Config().ingest.follow_external_links is False
    config = parse_config({"ingest": {"follow_external_links": True}}, tmp_path)
    assert config.ingest.follow_external_links is True


def test_relative_paths_are_taken_from_the_config_folder(tmp_path):
    data = {"storage": {"data_dir": "kb"}, "watch": {"folders": ["notes"]}}
    config = parse_config(data, tmp_path)
    assert config.data_dir == tmp_path / "kb"
    assert config.watch.folders == (tmp_path / "notes",)


def test_missing_and_invalid_files(tmp_path):
    with pytest.raises(ConfigError, match="does not exist"):
        load_config(tmp_path / "missing.toml")
    bad = tmp_path / "bad.toml"
    bad.write_text("[tree\n")
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_config(bad)


def test_defaults_without_a_file(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert load_config() == Config()
