"""The recipes shipped inside the package (`tformer.recipes`), as torchtune's `tune ls` / `tune cp`:

    tformer recipes list                          each recipe's name and first comment line
    tformer recipes copy NAME DEST [--overwrite]  a copy to edit (DEST a file, or a folder for NAME.yaml)

`tformer train NAME` and `tformer demo NAME` read a shipped recipe by name where NAME is not a file.
"""

from __future__ import annotations

import argparse


def add_commands(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("recipes", help="list the shipped YAML recipes, or copy one to edit")
    actions = p.add_subparsers(dest="action", metavar="{list,copy}", required=True)
    q = actions.add_parser("list", help="each recipe's name and what it trains")
    q.set_defaults(run=cmd_list)
    q = actions.add_parser("copy", help="copy a recipe to a file (or a folder) to edit")
    q.add_argument("name", help="a recipe's name, e.g. demo (`tformer recipes list`)")
    q.add_argument("dest", help="the file to write, a folder to write NAME.yaml into, or - for stdout")
    q.add_argument("--overwrite", action="store_true", help="replace DEST if it exists")
    q.set_defaults(run=cmd_copy)


def cmd_list(args: argparse.Namespace) -> int:
    from tformer.recipes import names, summary

    width = max(len(name) for name in names())
    for name in names():
        print(f"{name:<{width}}  {summary(name)}")
    return 0


def cmd_copy(args: argparse.Namespace) -> int:
    from tformer.recipes import copy

    written = copy(args.name, args.dest, overwrite=args.overwrite)
    if written is not None:  # "-": the recipe itself went to stdout
        print(f"wrote {written}")
    return 0
