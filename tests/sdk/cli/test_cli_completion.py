"""``mldiag completion bash|zsh|fish``: the scripts carry the parser's commands, gcloud
aliases, verbs and options, and bash completes with them."""

import re
import shutil
import subprocess
from collections.abc import Callable
from typing import Any

import pytest

from mldiag.cli import build_parser
from mldiag.cli.completion import command_tree

Mldiag = Callable[..., Any]

_ENTRY = re.compile(r"^    \[(?P<key>'[^']*'|[^\]]+)\]=(?P<words>'[^']*'|\S*)$")


def word_lists(script: str, array: str) -> dict[str, list[str]]:
    """The ``[path]='words'`` entries of one of the bash script's associative arrays."""
    block = script.split(f"declare -gA {array}=(\n", 1)[1].split("\n)", 1)[0]
    lists: dict[str, list[str]] = {}
    for line in block.splitlines():
        match = _ENTRY.match(line)
        assert match, line
        lists[match["key"].strip("'").removeprefix("mldiag").strip()] = (
            match["words"].strip("'").split()
        )
    return lists


@pytest.fixture
def bash_script(mldiag: Mldiag) -> str:
    result = mldiag("completion", "bash")
    assert result.code == 0, result.err
    return str(result.out)


def test_bash_lists_commands_aliases_and_verbs(bash_script: str) -> None:
    commands = word_lists(bash_script, "_mldiag_commands")
    for name in ("runs", "machine-learning-runs", "events", "monitored-events", "profiles"):
        assert name in commands[""]
    for name in ("profiler-sessions", "profiler-targets", "jobs", "custom-jobs", "completion"):
        assert name in commands[""]
    assert commands["runs"] == [
        "create",
        "list",
        "describe",
        "update",
        "delete",
        "purge",
        "goodput",
    ]
    assert commands["machine-learning-runs"] == commands["runs"]
    assert commands["auth tokens"] == ["create", "list", "revoke"]
    assert commands["runs list"] == []


def test_bash_lists_each_verbs_options(bash_script: str) -> None:
    options = word_lists(bash_script, "_mldiag_options")
    for flag in ("--limit", "--sort-by", "--uri", "--format", "--filter", "--help"):
        assert flag in options["runs list"]
    assert "--uri" not in options["runs describe"]
    assert "--version" in options[""]
    assert "--region" in options["custom-jobs create"]


def test_the_word_lists_are_the_parsers(bash_script: str) -> None:
    tree = command_tree(build_parser())
    assert word_lists(bash_script, "_mldiag_commands") == {k: v[0] for k, v in tree.items()}


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ("mldiag machine-learning-r", ["machine-learning-runs"]),
        ("mldiag runs de", ["delete", "describe"]),
        ("mldiag --format json runs list --so", ["--sort-by"]),
        ("mldiag auth tokens re", ["revoke"]),
    ],
)
def test_bash_completes_a_command_line(bash_script: str, line: str, expected: list[str]) -> None:
    words = line.split(" ")
    program = (
        f"{bash_script}\nCOMP_WORDS=({' '.join(words)}); COMP_CWORD={len(words) - 1}\n"
        '_mldiag_complete; printf "%s\\n" "${COMPREPLY[@]}"\n'
    )
    done = subprocess.run(  # the script is ours, the shell is the system's
        [str(shutil.which("bash")), "--norc", "--noprofile", "-c", program],
        capture_output=True,
        text=True,
        check=True,
        timeout=30,
    )
    assert sorted(done.stdout.split()) == expected


def test_zsh_loads_the_bash_functions(mldiag: Mldiag, bash_script: str) -> None:
    script = mldiag("completion", "zsh").out
    assert script.startswith("autoload -U +X bashcompinit && bashcompinit\n")
    assert script.endswith(bash_script)


def test_fish_completes_each_path(mldiag: Mldiag) -> None:
    script = mldiag("completion", "fish").out.splitlines()
    assert (
        "complete -c mldiag -n '__mldiag_at runs' -a 'create list describe update delete"
        " purge goodput'" in script
    )
    assert "complete -c mldiag -n '__mldiag_at '\"'\"'runs list'\"'\"'' -l sort-by" in script


def test_an_unknown_shell_is_a_usage_error(mldiag: Mldiag) -> None:
    result = mldiag("completion", "tcsh")
    assert result.code == 2
    assert result.out == ""


def test_help_says_how_to_install(mldiag: Mldiag) -> None:
    result = mldiag("completion", "--help")
    assert "~/.config/fish/completions/mldiag.fish" in result.out
    assert "source <(mldiag completion bash)" in result.out
