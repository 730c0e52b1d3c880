"""``mldiag login`` stores a platform's URL and a token for the CLI and the SDK, ``logout``
forgets them, ``config`` says which URL and which token source are in use (never the token).

A login is checked against the API before it is kept: a token the platform refuses, or a
URL where nothing answers, leaves the stored login as it was.
"""

from __future__ import annotations

import argparse
import getpass
import sys
from typing import Any

from mldiag.api_client import ApiError, ApiUnreachable, RegistryClient
from mldiag.credentials import default_home, local_token_path, resolve_connection
from mldiag.local.state import read_state
from mldiag.login import (
    LoginFileError,
    StoredLogin,
    config_dir,
    login_path,
    read_login,
    remove_login,
    save_login,
)

EXIT_REFUSED = 1
EXIT_USAGE = 2
EXIT_UNREACHABLE = 3

CONFIG_KEYS = ("api-url", "config-dir", "login-file", "home", "admin-token-file")
"""What ``mldiag config --get`` prints alone, for scripts."""


def add_login_commands(commands: Any) -> None:
    """Add ``login``, ``logout`` and ``config`` to ``mldiag``'s commands."""
    login = commands.add_parser(
        "login",
        help="store a platform's URL and token for the CLI and the SDK",
        description="Check a token against the platform's API and store both, owner-only, "
        "in the user's config directory ($MLDIAG_CONFIG_DIR or the platform's default). "
        "The token is asked for on a terminal unless --token or --token-stdin gives it. "
        "--local logs in to the stack `mldiag up` runs in $MLDIAG_HOME with its admin token. "
        "MLDIAG_API_URL and MLDIAG_TOKEN, and --api-url/--token, still win over a login.",
    )
    login.add_argument("url", nargs="?", metavar="URL", help="the platform's base URL")
    source = login.add_mutually_exclusive_group()
    source.add_argument("--token", dest="login_token", metavar="TOKEN", help="the API token")
    source.add_argument(
        "--token-stdin", action="store_true", help="read the token from standard input"
    )
    source.add_argument(
        "--local",
        action="store_true",
        help="the running local stack's URL and admin token (from --home or $MLDIAG_HOME)",
    )
    source.add_argument(
        "--show", action="store_true", help="say where the login is and which URL is used"
    )
    login.add_argument("--home", help="the local stack's home [$MLDIAG_HOME or the default]")
    login.set_defaults(handler=_login)

    logout = commands.add_parser(
        "logout", help="forget the stored login", description="Remove the stored login."
    )
    logout.set_defaults(handler=_logout)

    config = commands.add_parser(
        "config",
        help="show which platform URL and token source the CLI and the SDK use",
        description="Print the config directory, the stored login's URL, the URL in use and "
        "where its token comes from (argument, MLDIAG_TOKEN, login, the local admin token). "
        "Never prints a token.",
    )
    config.add_argument("--get", choices=CONFIG_KEYS, help="print only this value")
    config.set_defaults(handler=_config)


def _login(args: argparse.Namespace) -> int:
    if args.show:
        return _config(argparse.Namespace(get=None))
    try:
        login = _local_login(args.home) if args.local else _login_from_args(args)
    except _Refused as refused:
        print(f"mldiag login: error: {refused}", file=sys.stderr)
        return refused.code
    try:
        with RegistryClient(login.api_url, token=login.token, timeout=10.0) as client:
            client.list_runs(page_size=1)
    except ApiUnreachable as error:
        print(
            f"mldiag login: error: cannot reach the mldiag API at {error.url} ({error.detail}); "
            "nothing was saved",
            file=sys.stderr,
        )
        return EXIT_UNREACHABLE
    except ApiError as error:
        if error.status != 403:  # 403: known but may not list runs
            print(
                f"mldiag login: error: {login.api_url} refused the token ({error.code}: "
                f"{error.message}); nothing was saved",
                file=sys.stderr,
            )
            return EXIT_REFUSED
        print(f"note: the token may not list runs ({error.code})", file=sys.stderr)
    path = save_login(login)
    print(f"logged in to {login.api_url}; the login is kept in {path}")
    return 0


class _Refused(Exception):
    """Why no login could even be tried, and the exit status that says so."""

    def __init__(self, message: str, code: int) -> None:
        super().__init__(message)
        self.code = code


def _login_from_args(args: argparse.Namespace) -> StoredLogin:
    if not args.url:
        raise _Refused("give the platform's URL (or --local for this machine's stack)", EXIT_USAGE)
    if not args.url.startswith(("http://", "https://")):
        raise _Refused(f"{args.url!r} is not an http:// or https:// URL", EXIT_USAGE)
    if args.login_token:
        token = args.login_token
    elif args.token_stdin:
        token = sys.stdin.readline()
    elif sys.stdin.isatty():
        token = getpass.getpass(f"API token for {args.url}: ")
    else:
        raise _Refused("no terminal to ask the token on: give --token or --token-stdin", EXIT_USAGE)
    token = token.strip()
    if not token:
        raise _Refused("the token is empty", EXIT_USAGE)
    return StoredLogin(api_url=args.url, token=token)


def _local_login(home_arg: str | None) -> StoredLogin:
    env = {"MLDIAG_HOME": home_arg} if home_arg else None
    home = default_home(env)
    state = read_state(home)
    api = state and (state.component("edge") or state.component("run-registry"))
    if not api:
        raise _Refused(f"no stack is running in {home}: start it with `mldiag up`", EXIT_REFUSED)
    token_file = local_token_path(env)
    try:
        token = token_file.read_text().strip()
    except OSError as error:
        raise _Refused(f"cannot read {token_file}: {error.strerror}", EXIT_REFUSED) from None
    return StoredLogin(api_url=api.url, token=token)


def _logout(_args: argparse.Namespace) -> int:
    path = login_path()
    if remove_login():
        print(f"logged out: removed {path}")
    else:
        print(f"not logged in (no {path})")
    return 0


def _config(args: argparse.Namespace) -> int:
    try:
        stored = read_login()
        connection = resolve_connection()
    except LoginFileError as error:
        print(f"mldiag config: error: {error}", file=sys.stderr)
        return EXIT_REFUSED
    values = {
        "api-url": connection.api_url,
        "config-dir": str(config_dir()),
        "login-file": str(login_path()),
        "home": str(default_home()),
        "admin-token-file": str(local_token_path()),
    }
    if args.get:
        print(values[args.get])
        return 0
    sources = {
        "argument": "an argument",
        "MLDIAG_API_URL": "MLDIAG_API_URL",
        "MLDIAG_TOKEN": "MLDIAG_TOKEN",
        "login": f"the stored login ({values['login-file']})",
        "default": "the default (the local stack)",
        "none": "none (requests will be refused)",
    }
    rows = [
        ("login", f"{stored.api_url} ({values['login-file']})" if stored else "none"),
        ("api url", f"{connection.api_url} from {sources[connection.api_url_source]}"),
        (
            "token",
            sources.get(
                connection.token_source,
                f"the local stack's admin token ({connection.token_source})",
            ),
        ),
        ("stack home", values["home"]),
    ]
    width = max(len(key) for key, _value in rows)
    for key, value in rows:
        print(f"{key.ljust(width)}  {value}")
    return 0
