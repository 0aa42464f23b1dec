"""`users`: the people of a team server, their tokens, roles and folder grants."""

from __future__ import annotations

import argparse
import json
import os
from typing import Any

from psirag_kb.config import Config
from psirag_kb.status_text import local_time


def _users_call(config: Config) -> Any:
    """`users` commands: the remote or running daemon's API (admin token), else people.json
    in the data directory (a running daemon sees that within a second)."""
    from psirag_kb.people import People, Users
    from psirag_kb.service.client import remote_daemon, running_daemon

    daemon = remote_daemon(config) or running_daemon(config)
    if daemon is not None:
        return daemon.users
    users = Users(People(config.data_dir))

    def local(action: str, name: str = "", role: str | None = None,
              read: list[str] | None = None) -> dict[str, Any]:
        if action == "list":
            return users.list()
        if action == "add":
            return users.add(name, role or "reader", read or [])
        if action in ("revoke", "rotate"):
            return getattr(users, action)(name)
        return getattr(users, action)(name, read or [])

    return local


def _when(stamp: float | None) -> str:
    """A time a person or token was made or used, or 'never'."""
    return "never" if not stamp else local_time(stamp)


def _print_person(person: dict[str, Any]) -> None:
    """A person: role, sign-in source, times, groups, grants and named tokens."""
    source = person.get("source", "token")
    print(f"{person['name']:<20} {person['role']:<7} {source:<5} created "
          f"{_when(person['created'])}, last used {_when(person['last_used'])}"
          + (f", last sign-in {_when(person.get('last_sign_in'))}"
             if source != "token" else ""))
    if person.get("groups"):
        print(f"    groups {', '.join(person['groups'])}")
    for grant in person["grants"]:
        print(f"    reads {grant}")
    for grant in person.get("group_grants", []):
        if grant not in person["grants"]:
            print(f"    reads {grant} (from a group)")
    for token in person.get("tokens", []):
        print(f"    token {token['name']}: made {_when(token['created'])}, last used "
              f"{_when(token['last_used'])}")


def cmd_users(args: argparse.Namespace, config: Config) -> int:
    """Add, list, grant, ungrant, revoke or rotate a person, through the daemon if one runs."""
    call = _users_call(config)
    read = [p if config.api.server else os.path.abspath(os.path.expanduser(p))
            for p in getattr(args, "read", None) or []]
    if args.action == "list":
        result = call("list")
    elif args.action == "add":
        result = call("add", args.name, args.role, read)
    else:
        result = call(args.action, args.name, read=read)
    if args.json:
        print(json.dumps({"name": result["name"], "token": result["token"]}
                         if "token" in result else result))
        return 0
    if "token" in result:
        print(f"token of {result['name']} (shown this once; give it to them, they set "
              f"PSIRAG_KB_TOKEN or [api] token_file):\n{result['token']}")
    elif "users" in result:
        for person in result["users"]:
            _print_person(person)
        if not result["users"]:
            print("nobody yet: `psirag-kb users add NAME --read FOLDER`")
    elif "revoked" in result:
        print(f"{result['revoked']} removed; their token no longer works")
    else:
        print(f"{result['name']} ({result['role']}) reads: "
              f"{', '.join(result['grants']) or 'nothing'}")
    return 0
