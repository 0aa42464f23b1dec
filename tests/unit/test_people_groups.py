"""People from an identity provider or sign-in proxy: groups -> role and grants at each
sign-in, hand grants kept apart, refusals; personal tokens; the [auth] configuration."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from psirag_kb.cli import main
from psirag_kb.config import GroupConfig, parse_config
from psirag_kb.errors import ConfigError
from psirag_kb.people import People, PeopleError, SignInRefused, UnknownPerson, token_hash

GROUPS = (GroupConfig("eng", "reader", ("/srv/eng", "/srv/shared")),
          GroupConfig("ops", "editor", ("/srv/ops",)),
          GroupConfig("boss", "admin", ()),
          GroupConfig("lobby", "reader", ()))


def test_a_first_sign_in_creates_the_person_from_their_groups(tmp_path: Path) -> None:
    people = People(tmp_path)
    person = people.sign_in("ana", "oidc", ["eng", "unknown-group"], GROUPS)
    assert (person.source, person.role, person.groups) == ("oidc", "reader",
                                                           ("eng", "unknown-group"))
    access = people.access_of("ana")
    assert access is not None and access.grants == ("/srv/eng", "/srv/shared")
    listed = people.listed()[0]
    assert listed["source"] == "oidc" and listed["groups"] == ["eng", "unknown-group"]
    assert listed["last_sign_in"] is not None and listed["grants"] == []
    assert person.token_sha256 == "" and people.access_by_hash("") is None


def test_role_is_the_highest_and_grants_the_union_plus_hand_grants(tmp_path: Path) -> None:
    people = People(tmp_path)
    people.sign_in("bo", "oidc", ["eng", "ops"], GROUPS)
    people.grant("bo", ["/srv/extra"])
    access = people.access_of("bo")
    assert access is not None and access.role == "editor"
    assert set(access.grants or ()) == {"/srv/eng", "/srv/shared", "/srv/ops", "/srv/extra"}
    # moved out of eng at the provider: eng's folders go at the next sign-in, the hand grant stays
    people.sign_in("bo", "oidc", ["lobby"], GROUPS)
    access = people.access_of("bo")
    assert access is not None and access.role == "reader"
    assert access.grants == ("/srv/extra",)
    assert people.sign_in("bo", "oidc", ["boss"], GROUPS).access.everything


def test_no_granting_group_is_refused_and_takes_the_old_groups_away(tmp_path: Path) -> None:
    people = People(tmp_path)
    with pytest.raises(SignInRefused, match="no group that grants"):
        people.sign_in("cy", "oidc", ["lobby", "nonsense"], GROUPS)
    people.sign_in("dee", "oidc", ["eng"], GROUPS)
    token = people.make_token("dee", "laptop")
    assert people.access_for(token).grants == ("/srv/eng", "/srv/shared")
    with pytest.raises(SignInRefused):
        people.sign_in("dee", "oidc", [], GROUPS)
    assert people.access_for(token).grants == ()  # the token reads nothing now


def test_a_provider_cannot_take_over_a_person_made_by_hand(tmp_path: Path) -> None:
    people = People(tmp_path)
    token = people.add("eve", "admin")
    with pytest.raises(SignInRefused, match="users add"):
        people.sign_in("eve", "oidc", ["eng"], GROUPS)
    people.sign_in("fay", "proxy", ["eng"], GROUPS)
    with pytest.raises(SignInRefused, match="through the proxy"):
        people.sign_in("fay", "oidc", ["boss"], GROUPS)
    assert people.access_for(token).everything
    with pytest.raises(PeopleError):
        people.sign_in("not a name!", "oidc", ["eng"], GROUPS)
    with pytest.raises(PeopleError, match="make their own tokens"):
        people.rotate("fay")


def test_personal_tokens_are_made_listed_used_and_revoked(tmp_path: Path) -> None:
    people = People(tmp_path)
    people.sign_in("gus", "oidc", ["eng"], GROUPS)
    first, second = people.make_token("gus", "laptop"), people.make_token("gus", "ci")
    assert first != second and first not in (tmp_path / "people.json").read_text()
    assert token_hash(first) in (tmp_path / "people.json").read_text()
    assert people.access_for(first).name == "gus"
    listed = people.tokens_of("gus")
    assert [t["name"] for t in listed] == ["laptop", "ci"]
    assert listed[0]["last_used"] is not None and listed[1]["last_used"] is None
    assert "token_sha256" not in json.dumps(listed) and "token_sha256" not in json.dumps(
        people.listed())
    with pytest.raises(PeopleError, match="already"):
        people.make_token("gus", "ci")
    with pytest.raises(PeopleError, match="cannot name"):
        people.make_token("gus", "../x")
    people.drop_token("gus", "laptop")
    assert people.access_for(first) is None and people.access_for(second).name == "gus"
    with pytest.raises(UnknownPerson):
        people.drop_token("gus", "laptop")
    # a person made by hand may hold personal tokens too, beside their own
    hand = people.add("hal", "reader", ["/srv/hal"])
    made = people.make_token("hal", "tui")
    assert people.access_for(hand).name == people.access_for(made).name == "hal"
    people.write_seen(every_s=0)
    assert People(tmp_path).tokens_of("gus")[0]["last_used"] is not None


def test_users_list_shows_source_groups_and_last_sign_in(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    people = People(tmp_path)
    people.sign_in("ivy", "oidc", ["eng"], GROUPS)
    people.make_token("ivy", "laptop")
    assert main(["--data-dir", str(tmp_path), "users", "list"]) == 0
    out = capsys.readouterr().out
    assert "ivy" in out and "oidc" in out and "last sign-in" in out and "groups eng" in out
    assert "/srv/eng (from a group)" in out and "token laptop" in out


def config(text: dict) -> object:
    return parse_config(text, Path("/"))


def test_the_auth_configuration_is_strict() -> None:
    auth = config({"auth": {"session_hours": 4, "tokens_on_page": False,
                            "oidc": {"issuer": "https://id.example.org/realms/acme",
                                     "client_id": "kb"},
                            "proxy": {"trusted": ["127.0.0.1", "10.0.0.0/8"]},
                            "groups": {"eng": {"role": "editor", "read": ["/srv/eng/"]}}}}).auth
    assert auth.session_hours == 4 and not auth.tokens_on_page
    assert auth.oidc.scopes == ("openid", "profile", "email") and auth.oidc.client_id == "kb"
    assert auth.proxy.user_header == "X-Forwarded-User"
    assert auth.group("eng") == GroupConfig("eng", "editor", ("/srv/eng",))
    assert config({"auth": {"oidc": {"issuer": "http://127.0.0.1:9000", "client_id": "x"}}})
    bad = [
        ({"auth": {"nope": 1}}, "unknown setting \\[auth\\] nope"),
        ({"auth": {"oidc": {"issuer": "http://id.example.org", "client_id": "x"}}}, "https"),
        ({"auth": {"oidc": {"issuer": "https://id.example.org"}}}, "client_id is required"),
        ({"auth": {"oidc": {"issuer": "https://i.org", "client_id": "x", "scope": []}}},
         "unknown setting"),
        ({"auth": {"oidc": {"issuer": "https://i.org", "client_id": "x",
                            "scopes": ["profile"]}}}, "openid"),
        ({"auth": {"proxy": {"trusted": ["proxy.example.org"]}}}, "not an address"),
        ({"auth": {"proxy": {}}}, "trusted must list"),
        ({"auth": {"groups": {"eng": {"role": "boss"}}}}, "role must be"),
        ({"auth": {"groups": {"eng": {"read": ["relative"]}}}}, "absolute"),
        ({"auth": {"groups": {"eng": {"reads": []}}}}, "unknown setting"),
        ({"auth": {"session_hours": 0}}, "positive"),
    ]
    for text, message in bad:
        with pytest.raises(ConfigError, match=message):
            config(text)


def test_the_commented_auth_block_of_config_toml_parses_once_uncommented(tmp_path: Path) -> None:
    text = (Path(__file__).parents[2] / "config.toml").read_text()
    block = text[text.index("# [auth]\n"):]
    lines = [line[2:] if line.startswith("# ") else line.lstrip("#") for line in
             block.splitlines()]
    (tmp_path / "auth.toml").write_text("\n".join(lines) + "\n")
    from psirag_kb.config import load_config

    auth = load_config(tmp_path / "auth.toml").auth
    assert auth.oidc is not None and auth.oidc.issuer.startswith("https://")
    assert auth.proxy is not None and auth.proxy.trusted == ("127.0.0.1",)
    assert auth.group("engineering") is not None
