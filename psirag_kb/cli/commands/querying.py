"""`query`, `chat` and `conversations`: searching, asking, and the stored conversations."""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

from psirag_kb.cli.connection import client, local_paths
from psirag_kb.cli.results import print_result
from psirag_kb.config import Config
from psirag_kb.errors import KBError
from psirag_kb.locations import place


def cmd_query(args: argparse.Namespace, config: Config) -> int:
    """One search (or one turn of a stored conversation), printed as text or JSON."""
    with client(config) as kb:
        within = local_paths(config, args.within)
        if args.conversation is not None:
            if args.summarize:
                raise KBError("--summarize does not continue a conversation; drop one of them")
            result = kb.ask(args.text, conversation=args.conversation, mode=args.mode,
                            k=args.k, **({"within": within} if within else {}))
        else:
            result = kb.query(args.text, mode=args.mode, k=args.k, summarize=args.summarize,
                              **({"within": within} if within else {}))
    if args.json:
        print(json.dumps(result))
    else:
        print_result(result)
    return 0


def _ask_each_line(args: argparse.Namespace, kb: Any, conversation: str,
                   within: list[str] | None, interactive: bool) -> None:
    """Read questions until an end of input (or an empty line on a terminal), printing each
    turn's result."""
    while True:
        try:
            line = input("> " if interactive else "")
        except EOFError:
            break
        if not line.strip():
            if interactive:
                break
            continue
        try:
            result = kb.ask(line, conversation=conversation, mode=args.mode, k=args.k,
                            **({"within": within} if within else {}))
        except KBError as exc:  # one bad question does not end the conversation
            print(f"error: {exc}", file=sys.stderr)
            continue
        if args.json:
            print(json.dumps(result), flush=True)
        else:
            if not interactive:
                print(f"Q: {line.strip()}")
            print_result(result)
            print(flush=True)


def cmd_chat(args: argparse.Namespace, config: Config) -> int:
    """A conversation: each line is a question; a follow-up is searched with the subject of
    the earlier turns ("searched: ..." says how)."""
    interactive = sys.stdin.isatty() and not args.json
    with client(config) as kb:
        within = local_paths(config, args.within)
        conversation = args.conversation or kb.new_conversation()["id"]
        if args.conversation:
            kb.conversation(conversation)  # an unknown id fails before the first question
        if interactive:
            print(f"conversation {conversation} (continue it later with `psirag-kb chat "
                  f"--conversation {conversation}`); an empty line or Ctrl-D ends it",
                  file=sys.stderr)
        _ask_each_line(args, kb, conversation, within, interactive)
    return 0


def _print_turns(result: dict[str, Any]) -> None:
    """A stored conversation: its title, then each turn with its answer and passages."""
    print(f"{result['title']} ({result['id']})")
    for turn in result["turns"]:
        searched = (f"  (searched: {turn['searched']})"
                    if turn["rewrite"] != "as_is" else "")
        print(f"\n{turn['turn']}. {turn['question']}{searched}")
        if turn.get("answer"):
            print(f"   {turn['answer']}")
        for passage in turn["passages"]:
            if passage.get("withheld"):
                print(f"   [{passage['rank']}] withheld (no longer readable to you)")
            else:
                print(f"   [{passage.get('number', passage['rank'])}] {place(passage)}")


def cmd_conversations(args: argparse.Namespace, config: Config) -> int:
    """List, show, rename or delete the caller's stored conversations."""
    action = args.action or "list"
    with client(config) as kb:
        if action == "list":
            result = kb.conversations()
        elif action == "show":
            result = kb.conversation(args.id)
        elif action == "rename":
            result = kb.rename_conversation(args.id, args.title)
        else:
            result = kb.delete_conversation(args.id)
    if args.json:
        print(json.dumps(result))
    elif action == "list":
        for talk in result["conversations"]:
            when = time.strftime("%Y-%m-%d %H:%M", time.localtime(talk["updated"]))
            print(f"{talk['id']}  {when}  {talk['turns']:3d} turn(s)  {talk['title']}")
        if not result["conversations"]:
            print("no conversations yet: start one with `psirag-kb chat`")
    elif action == "show":
        _print_turns(result)
    elif action == "rename":
        print(f"{result['id']}: {result['title']}")
    else:
        print(f"deleted {result['deleted']}")
    return 0
