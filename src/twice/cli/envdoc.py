"""The environment-variable table of docs/reference/cli.md, generated from the commands.

Every option of every command can be set from the environment (``twice.cli.app.prepare``:
``TWICE_<COMMAND>_<OPTION>``, ``TWICE_LOG_LEVEL`` and ``TWICE_LOG_FORMAT`` for all). This
module lists them as the page shows them; ``python -m twice.cli.envdoc`` rewrites the page's
table between its markers, and a test fails when the page and the commands disagree.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import click

START = "<!-- env-vars:start (generated: python -m twice.cli.envdoc) -->"
END = "<!-- env-vars:end -->"


def leaves() -> Iterator[tuple[str, click.Command]]:
    """``twice COMMAND ...`` and its Click command, for every command that runs (not groups),
    in the order ``twice --help`` lists them."""
    from twice.cli.app import cli

    def walk(command: click.Command, path: list[str], parent: click.Context | None
             ) -> Iterator[tuple[str, click.Command]]:
        if not isinstance(command, click.Group):
            yield " ".join(path), command
            return
        ctx = click.Context(command, info_name=path[-1], parent=parent)
        for name in command.list_commands(ctx):
            sub = command.get_command(ctx, name)
            if sub is not None:
                yield from walk(sub, [*path, name], ctx)

    yield from walk(cli, ["twice"], None)


def rows() -> list[tuple[str, str, str]]:
    """(environment variable, option, command) for every option shown in ``--help``; the
    options every command takes (``--log-level``, ``--log-format``) once, as ``every``."""
    found: list[tuple[str, str, str]] = []
    shared: dict[str, str] = {}
    for path, command in leaves():
        for param in command.params:
            if not isinstance(param, click.Option) or param.hidden:
                continue
            names = [param.envvar] if isinstance(param.envvar, str) else list(param.envvar or [])
            option = max(param.opts, key=len)
            for name in names:
                if name in ("TWICE_LOG_LEVEL", "TWICE_LOG_FORMAT"):
                    shared[name] = option
                else:
                    found.append((name, option, path))
    return [*((name, option, "every command") for name, option in shared.items()), *found]


def table() -> str:
    """The Markdown table of :func:`rows`."""
    lines = ["| variable | option | command |", "|---|---|---|"]
    lines += [f"| `{name}` | `{option}` | `{path}` |" if path != "every command"
              else f"| `{name}` | `{option}` | every command |"
              for name, option, path in rows()]
    return "\n".join(lines)


def render(page: str) -> str:
    """``page`` with the text between the markers replaced by :func:`table`."""
    head, _, rest = page.partition(START)
    _, _, tail = rest.partition(END)
    return f"{head}{START}\n{table()}\n{END}{tail}"


def main(argv: list[str] | None = None) -> None:
    """Rewrite the table in the page named (default docs/reference/cli.md); a page without
    the markers is refused (``ValueError``), untouched."""
    args = sys.argv[1:] if argv is None else argv
    path = Path(args[0] if args else "docs/reference/cli.md")
    page = path.read_text(encoding="utf-8")
    if START not in page or END not in page:
        raise ValueError(f"{path}: no {START} ... {END} markers")
    path.write_text(render(page), encoding="utf-8")


if __name__ == "__main__":
    main()
