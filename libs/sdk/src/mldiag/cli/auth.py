"""``mldiag auth tokens``: create, list and revoke API tokens (admins only)."""

from __future__ import annotations

import argparse
from typing import Any

from mldiag.cli.common import Context, api_command_group, api_verb, positive
from mldiag.cli.output import render_table, short_time


def add_auth_commands(commands: Any) -> None:
    """Add ``auth`` (its ``tokens`` verbs) to ``mldiag``'s commands."""
    tokens_help = "create, list and revoke API tokens (admins only)"
    tokens = api_command_group(commands, "auth", "manage access to the API").add_parser(
        "tokens", help=tokens_help, description=tokens_help
    )
    verbs = tokens.add_subparsers(dest="tokens_verb", required=True, metavar="VERB")
    _add_tokens(verbs, api_verb)


def _add_tokens(verbs: Any, verb: Any) -> None:
    create = verb(verbs, "create", _tokens_create, "create a token; prints its secret once")
    create.add_argument("--role", choices=("viewer", "editor", "admin"), default="viewer")
    create.add_argument("--display-name", default="", help="what the token is for")
    create.add_argument("--ttl", type=positive, help="expire after this many seconds")
    verb(verbs, "list", _tokens_list, "list tokens (never their secrets)")
    revoke = verb(verbs, "revoke", _tokens_revoke, "revoke a token everywhere")
    revoke.add_argument("token_id", metavar="TOKEN_ID", help="e.g. tok-1a2b3c4d5e6f")


def _tokens_create(ctx: Context, args: argparse.Namespace) -> int:
    answer = ctx.client.create_token(
        args.role, display_name=args.display_name, ttl_seconds=args.ttl
    )
    token = answer["token"]
    ctx.emit(
        answer,
        lambda: (
            f"created {token['tokenId']} ({token['role']}); its secret, shown only now:\n"
            f"{answer['secret']}"
        ),
    )
    return 0


def _tokens_list(ctx: Context, _args: argparse.Namespace) -> int:
    answer = ctx.client.list_tokens()
    tokens = answer.get("apiTokens", [])

    def table() -> str:
        if not tokens:
            return "no tokens"
        rows = [
            (
                t["tokenId"],
                t["role"],
                t["state"],
                t.get("displayName", ""),
                t["secretPrefix"] + "…",
                short_time(t["createTime"]),
                short_time(t.get("expireTime")),
            )
            for t in tokens
        ]
        return render_table(
            ("TOKEN", "ROLE", "STATE", "NAME", "SECRET", "CREATED", "EXPIRES"), rows
        )

    ctx.emit(answer, table)
    return 0


def _tokens_revoke(ctx: Context, args: argparse.Namespace) -> int:
    answer = ctx.client.revoke_token(args.token_id)
    ctx.emit(answer, lambda: f"revoked {answer['tokenId']}")
    return 0
