"""Markdown command blocks run as written: the mechanism of the README test and the guides' test.

A document's blocks run in order, in one ``bash`` shell, in a fresh directory (issues 20, 37):

- a ```` ```bash ```` block: every line that is not a comment is a command (``\\`` continues a
  line; a here-document runs whole, up to its terminator);
- a ```` ```console ```` block: every ``$ `` line is a command, the lines after it are what the
  document says it prints, and a ``$ echo $?`` line followed by a number is the exit code of the
  command before it.

Each command must exit 0, or the code the document states (``# exit 1: ...`` on the command, or
``$ echo $?``). What a console block shows is checked against what the command printed
(:func:`output_problems`): the outcome in each table row it shows (by task and interval), the
outcome of each backfill line, and every other line that holds nothing that changes from run to
run (times, ids, paths, ages; a line trimmed with ``...`` is not compared).

An HTML comment just before a block (``readme-test:`` or ``docs-test:``, several may stack) says:

- ``skip: WHY``: not run (an install, the test suite itself);
- ``instead: COMMAND``: run COMMAND in the block's place (listed, like a skip; what a
  one-command console block shows is still checked against it);
- ``needs ENV [ENV...]``: run only where those test environments exist (``postgres``,
  ``airflow``, ``spark``, ``dbt``); otherwise the block is listed as skipped, with why;
- ``file: NAME``: the block (a ``python`` one, say) is a file the text tells the reader to save:
  it is written as ``NAME`` at that point;
- ``file: NAME from OTHER.md``: copy the block saved as ``NAME`` in another document (in the
  same folder) first, as the text tells the reader to.

Every block is run or listed: :func:`script` returns the blocks it left out with the reason, and
the tests print them, so a skip is visible.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

DIRECTIVE = re.compile(
    r"<!--\s*(?:readme|docs)-test:\s*(skip|instead|needs|file)\s*:?\s*(.*?)\s*-->")
EXPECTED_EXIT = re.compile(r"#\s*exit (\d+)\b")
HEREDOC = re.compile(r"<<-?\s*['\"]?(\w+)['\"]?")
FENCE = re.compile(r"^```(\w*)\s*$")


@dataclass
class Command:
    line: int  # line of the document where the command starts
    text: str  # continuation lines joined
    exit: int = 0
    shown: list[str] = field(default_factory=list)  # what a console block says it prints


@dataclass
class Block:
    line: int  # document line of the opening fence
    kind: str  # the fence's language: bash, console, python, ...
    commands: list[Command]
    directives: list[tuple[str, str]]
    body: str = ""

    @property
    def directive(self) -> tuple[str, str] | None:
        """The block's own directive (skip, instead, needs, or file NAME), if any."""
        for kind, argument in self.directives:
            if not (kind == "file" and " from " in argument):
                return kind, argument
        return None


def _bash_commands(lines: list[tuple[int, str]]) -> list[Command]:
    found: list[Command] = []
    n = 0
    while n < len(lines):
        first, current = lines[n]
        text = current
        while text.rstrip().endswith("\\") and n + 1 < len(lines):
            n += 1
            text = text.rstrip()[:-1] + " " + lines[n][1].strip()
        heredoc = HEREDOC.search(text)
        if heredoc and not text.lstrip().startswith("#"):
            end = heredoc.group(1)
            while n + 1 < len(lines):
                n += 1
                text += "\n" + lines[n][1]
                if lines[n][1].strip() == end:
                    break
        n += 1
        stripped = text.strip()
        if stripped and not stripped.startswith("#"):
            expected = EXPECTED_EXIT.search(stripped)
            found.append(Command(first, stripped, int(expected.group(1)) if expected else 0))
    return found


def _console_commands(lines: list[tuple[int, str]]) -> list[Command]:
    found: list[Command] = []
    n = 0
    while n < len(lines):
        number, line = lines[n]
        n += 1
        if not line.startswith("$ "):
            if found:
                found[-1].shown.append(line)
            continue
        text = line[2:]
        while text.rstrip().endswith("\\") and n < len(lines):
            text = text.rstrip()[:-1].rstrip() + " " + lines[n][1].strip()
            n += 1
        if text.strip() == "echo $?" and found and n < len(lines):
            found[-1].exit = int(lines[n][1].split()[0])
            n += 1
            continue
        expected = EXPECTED_EXIT.search(text)
        found.append(Command(number, text.strip(), int(expected.group(1)) if expected else 0))
    return found


def blocks(text: str) -> list[Block]:
    """The fenced blocks of a Markdown text, with the directives just before each."""
    found: list[Block] = []
    lines = text.splitlines()
    directives: list[tuple[str, str]] = []
    n = 0
    while n < len(lines):
        line = lines[n]
        match = DIRECTIVE.search(line)
        fence = FENCE.match(line.strip())
        if match:
            directives.append((match.group(1), match.group(2)))
        elif fence and fence.group(1):
            kind, start, body = fence.group(1), n + 1, []
            n += 1
            while n < len(lines) and lines[n].strip() != "```":
                body.append((n + 1, lines[n]))
                n += 1
            commands = (_bash_commands(body) if kind in ("bash", "sh") else
                        _console_commands(body) if kind == "console" else [])
            found.append(Block(start, kind, commands, directives,
                               "".join(f"{b}\n" for _, b in body)))
            directives = []
        elif line.strip() and not line.startswith("<!--"):
            directives = []
        n += 1
    return found


def _quoted(text: str) -> str:
    return "'" + text.replace("'", "'\"'\"'") + "'"


def saved_file(document: Path, name: str) -> str:
    """The body of the block that ``document`` tells the reader to save as ``name``."""
    for block in blocks(document.read_text(encoding="utf-8")):
        if ("file", name) in block.directives:
            return block.body
    raise AssertionError(f"{document.name} has no block marked 'file: {name}'")


def script(document: str, all_blocks: list[Block], environment: set[str], *,
           folder: Path | None = None, outputs: str = ".docs-test"
           ) -> tuple[str, list[str], list[tuple[str, Command]]]:
    """The shell script that runs a document's blocks, the blocks it leaves out (with why),
    and the commands run as ``(output file stem, command)``: each command's stdout and stderr
    go to ``OUTPUTS/N.out`` and ``.err``; its echo and a failure go to stderr."""
    out = ["set -u", f"mkdir -p {outputs}",
           "fail() { echo \"$1: exit $2 (expected $3): $4\" >&2; "
           f"tail -n 40 {outputs}/$5.out {outputs}/$5.err >&2; exit 1; }}"]
    left_out: list[str] = []
    ran: list[tuple[str, Command]] = []
    for block in all_blocks:
        where = f"{document}:{block.line}"
        for kind, argument in block.directives:
            if kind == "file" and " from " in argument:
                name, _, other = argument.partition(" from ")
                assert folder is not None, "file: NAME from OTHER needs the document's folder"
                body = saved_file(folder / other.strip(), name.strip())
                out.append(f"printf '%s' {_quoted(body)} > {_quoted(name.strip())}")
        said = {kind: argument for kind, argument in block.directives
                if not (kind == "file" and " from " in argument)}
        if "skip" in said:
            left_out.append(f"{where}: skipped: {said['skip']}")
            continue
        needs = said.get("needs", "").split()
        missing = [name for name in needs if name not in environment]
        if missing:
            left_out.append(f"{where}: needs {' and '.join(missing)}, not here")
            continue
        if "file" in said:
            out.append(f"printf '%s' {_quoted(block.body)} > {_quoted(said['file'])}")
            continue
        commands = block.commands
        if "instead" in said:  # one command in place of the block's: what it shows holds
            (only,) = commands if len(commands) == 1 else (Command(block.line, ""),)
            commands = [Command(only.line, said["instead"], only.exit, only.shown)]
            left_out.append(f"{where}: not as written: ran instead: {said['instead']}")
        for command in commands:
            if "airflow" in needs and "venv .venv-airflow" in command.text:
                continue  # the test's Airflow venv stands in for the one this line creates
            stem = str(len(ran))
            ran.append((stem, command))
            quoted = _quoted(command.text)
            out.append(f"echo {_quoted('$ ' + command.text)} >&2")
            out.append(f"{{ {command.text}\n}} > {outputs}/{stem}.out 2> {outputs}/{stem}.err")
            out.append(f"rc=$?; [ $rc -eq {command.exit} ] || "
                       f"fail {document}:{command.line} $rc {command.exit} {quoted} {stem}")
    return "\n".join(out) + "\n", left_out, ran


# ----------------------------------------------------------------------------- output checks

OUTCOMES = re.compile(
    r"^\s+(\d{4}-\d{2}-\d{2})\s+(\w+)\s+(succeeded|skipped|failed[\w-]*|held|blocked|"
    r"unknown[\w-]*|deadline-infeasible|superseded)\b(.*)$")
VOLATILE = re.compile(
    r"\.\.\.|…|\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}|\b[0-9a-f]{12,}\b|\(\d+(\.\d+)? (s|min|h)\)|"
    r"\d+(\.\d+)? s\b|seq \d+|/tmp/|:///|vm:\d+|\$PWD|\bage\b|old\b|[┏┃┡│└━─]{3}")
#: The columns whose value a shown row must match (not ``settled``: which of several racing
#: workers ran a unit varies from run to run; its outcome does not).
STATE_COLUMNS = ("outcome", "health", "action", "decision")


def _cells(line: str) -> list[str]:
    return [cell.strip() for cell in line.strip().strip("│┃").split("│" if "│" in line else "┃")]


#: A unit's id as the terminal tables show it (a unique prefix): pipeline, task, interval day.
UNIT_ID = re.compile(r"^([\w-]+)\.([\w-]+)\.(\d{4})(\d{2})(\d{2})")


def _plain_rows(lines: list[str]) -> dict[tuple[str, str], dict[str, str]]:
    """The rows of the terminal's borderless tables (``twice run``, ``twice status``): a
    header whose first cell is ``unit``, cells apart by two spaces or more, each row keyed by
    the task and day its unit id names, as ``_rows`` keys a boxed table's (so a document's
    table of either layout is checked against the other)."""
    header: list[str] = []
    rows: dict[tuple[str, str], dict[str, str]] = {}
    for line in lines:
        cells = re.split(r"\s{2,}", line.strip())
        if cells and cells[0] == "unit" and len(cells) > 1:
            header = cells
            continue
        unit = UNIT_ID.match(cells[0]) if header and cells else None
        if unit is None:
            continue
        row = dict(zip(header, cells, strict=False))
        day = f"{unit.group(3)}-{unit.group(4)}-{unit.group(5)}"
        for name in (unit.group(2), f"{unit.group(1)}.{unit.group(2)}"):  # task, pipeline.task
            rows.setdefault((name, day), row)
            rows.setdefault((name, ""), row)
    return rows


def _rows(lines: list[str]) -> dict[tuple[str, str], dict[str, str]]:
    """``(first cell, interval) -> {column: cell}`` of the table rows in ``lines``, read under
    the header row before them (its first cell is ``task``, ``interval`` or ``unit of work``);
    the borderless tables' rows too (``_plain_rows``)."""
    header: list[str] = []
    rows: dict[tuple[str, str], dict[str, str]] = _plain_rows(lines)
    for line in lines:
        if "│" not in line and "┃" not in line:
            continue
        cells = _cells(line)
        if cells and cells[0] in ("task", "interval", "unit of work"):
            header = cells
            continue
        if not header or len(cells) != len(header) or not cells[0]:
            continue
        row = dict(zip(header, cells, strict=True))
        key = (row.get("task", cells[0]), row.get("interval", ""))
        rows.setdefault(key, row)
        rows.setdefault((key[0], ""), row)  # for a document's table without an interval
    return rows


def output_problems(shown: list[str], printed: str) -> list[str]:
    """What a console block shows that the command did not print (empty: it matches)."""
    problems: list[str] = []
    real_rows = _rows(printed.splitlines())
    for key, row in _rows(shown).items():
        if "..." in key[0] or "…" in key[0] or (key[1] == "" and "interval" in row):
            continue
        real = real_rows.get(key)
        if real is None:
            problems.append(f"no row {' '.join(key).strip()} in the output")
            continue
        for column in STATE_COLUMNS:
            if column in row and row[column] != real.get(column):
                problems.append(f"{' '.join(key).strip()}: {column} {row[column]!r} shown, "
                                f"{real.get(column)!r} printed")
    real_lines = {(m.group(1), m.group(2)): m for m in map(OUTCOMES.match, printed.splitlines())
                  if m}
    flat = " ".join(printed.split())
    for line in shown:
        said = OUTCOMES.match(line)
        if said:
            real_line = real_lines.get((said.group(1), said.group(2)))
            if real_line is None:
                problems.append(f"no line for {said.group(1)} {said.group(2)} in the output")
            elif real_line.group(3) != said.group(3):
                problems.append(f"{said.group(1)} {said.group(2)}: {said.group(3)} shown, "
                                f"{real_line.group(3)} printed")
            elif not VOLATILE.search(line) and (" ".join(line.split()) not in flat):
                problems.append(f"shown but not printed: {line.strip()}")
            continue
        if "│" in line or "┃" in line or not line.strip() or VOLATILE.search(line):
            continue
        if " ".join(line.split()) not in flat:
            problems.append(f"shown but not printed: {line.strip()}")
    return problems


# ----------------------------------------------------------------------------- environments

MARK = "created by the twice README test"  # the docs tests (the README test came first)


def environment(workdir: Path, databases: tuple[str, ...] = ()
                ) -> tuple[dict[str, str], set[str]]:
    """The variables a document's commands run with (none of the caller's ``TWICE_`` or
    Airflow settings; ``COLUMNS`` wide, so tables are not wrapped; this Python's ``bin`` first
    on ``PATH``) and the test environments present: ``postgres`` (``TWICE_TEST_POSTGRES_URL``:
    ``PGHOST``/``PGUSER``/``PGPASSWORD`` set from it for ``createdb``/``psql``, and each of
    ``databases`` dropped first if a docs test created it), ``airflow`` (``TWICE_AIRFLOW_VENV``,
    linked as ``.venv-airflow``), ``dbt`` (``TWICE_DBT_VENV``, linked as ``.venv-dbt``),
    ``spark`` (pyspark and a ``java``)."""
    import importlib.util
    import os
    import shutil
    import sys
    from urllib.parse import urlsplit

    env = {key: value for key, value in os.environ.items()
           if not key.startswith(("TWICE_", "AIRFLOW", "PG", "OPENLINEAGE"))}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env["COLUMNS"] = "250"
    available = set()
    postgres = os.environ.get("TWICE_TEST_POSTGRES_URL")
    if postgres:
        parts = urlsplit(postgres)
        env.update(PGHOST=parts.hostname or "127.0.0.1", PGPORT=str(parts.port or 5432),
                   PGUSER=parts.username or "", PGPASSWORD=parts.password or "")
        for name in databases:
            drop_database_made_here(postgres, name)
        available.add("postgres")
    for name, variable, program in (("airflow", "TWICE_AIRFLOW_VENV", "airflow"),
                                    ("dbt", "TWICE_DBT_VENV", "dbt")):
        venv = os.environ.get(variable)
        if venv and Path(venv, "bin", program).exists():
            (workdir / f".venv-{name}").symlink_to(venv)
            available.add(name)
            if name == "dbt":  # what the guide's skipped set-up block exports
                env["TWICE_DBT"] = str(Path(venv, "bin", "dbt"))
    if importlib.util.find_spec("pyspark") is not None and shutil.which("java"):
        available.add("spark")
    return env, available


def drop_database_made_here(url: str, name: str) -> None:
    """Drop database ``name`` if a docs test created it (so a document creates it afresh, and
    unit id prefixes stay unique); one it did not create is left as it is."""
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        found = conn.execute(
            "SELECT shobj_description(oid, 'pg_database') FROM pg_database WHERE datname = %s",
            (name,)).fetchone()
        if found is not None and found[0] == MARK:
            conn.execute(f'DROP DATABASE "{name}" WITH (FORCE)')


def mark_databases_made_here(url: str, names: tuple[str, ...], before: set[str]) -> None:
    """Mark the databases among ``names`` that a document's commands created (absent
    ``before``), so the next run drops them first."""
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        for name in names:
            exists = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s",
                                  (name,)).fetchone()
            if exists and name not in before:
                conn.execute(f"COMMENT ON DATABASE \"{name}\" IS '{MARK}'")


def existing_databases(url: str) -> set[str]:
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        return {row[0] for row in conn.execute("SELECT datname FROM pg_database")}
