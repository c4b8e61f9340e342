"""``twice policy``: print a retry policy's attempt sequence and translate it between tools.

Translating *from* a tool is a subcommand per tool (``twice policy from stepfunctions ...``)
whose options are that tool's own setting names, so ``--max-attempts`` can never mean twice's
attempts in one place and Step Functions' retries in another. Rich is imported only when a table
is printed; ``--json`` never loads it.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Iterable
from typing import Any

import click

from twice.cli import jsonkeys
from twice.cli.console import echo
from twice.core.backoff import jitter_bounds
from twice.core.policy import JITTERS, PolicyError, RetryPolicy
from twice.interop.translations import (
    FROM,
    ROW_LIMIT,
    TO,
    TOOL_NAMES,
    TOOLS,
    UNCAPPED,
    Translation,
    TranslationError,
    WaitRange,
    seconds,
)

_DEFAULT = RetryPolicy()
_JITTER_FORMULAS = {
    "none": "waits exactly the delay",
    "full": "waits uniform(0, delay)",
    "equal": "waits delay/2 + uniform(0, delay/2)",
    "additive": "waits delay + uniform(0, delay/4) (never shorter, up to 25 % longer)",
}


class Number(click.ParamType):
    """A finite number in range; integers stay ints so that '4' prints (and computes) as 4."""

    name = "number"

    def __init__(self, minimum: float = 0, maximum: float = UNCAPPED, *, above: bool = False,
                 allow_none: bool = False, metavar: str = "SECONDS") -> None:
        self.minimum = minimum
        self.maximum = maximum
        self.above = above
        self.allow_none = allow_none
        self.metavar = metavar

    def get_metavar(self, param: click.Parameter, ctx: click.Context) -> str:
        return self.metavar

    def convert(self, value: Any, param: click.Parameter | None,
                ctx: click.Context | None) -> float | None:
        if value is None or (isinstance(value, int | float) and not isinstance(value, bool)):
            number = value
        else:
            text = str(value).strip()
            if self.allow_none and text.lower() == "none":
                return None
            try:
                number = int(text)
            except ValueError:
                try:
                    number = float(text)
                except ValueError:
                    self.fail(f"{value!r} is not a number", param, ctx)
        if number is None:
            return None
        if not math.isfinite(number):
            self.fail(f"{value!r} is not a finite number", param, ctx)
        too_small = number <= self.minimum if self.above else number < self.minimum
        if too_small:
            bound = ">" if self.above else ">="
            self.fail(f"{value!r} must be {bound} {seconds(self.minimum)}", param, ctx)
        if number > self.maximum:
            self.fail(f"{value!r} must be <= {seconds(self.maximum)}", param, ctx)
        return number


SECONDS = Number()
TIMEOUT = Number(above=True, allow_none=True)
MULTIPLIER = Number(1, 1000, metavar="FACTOR")


def _setting(flag: str, kind: click.ParamType, default: Any, help: str, *,
             name: str | None = None) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """A setting option with a default, shown in --help (``name``: the argument it fills)."""
    names = (flag,) if name is None else (flag, name)
    return click.option(*names, type=kind, default=default, show_default=True, help=help)


def _output_options(command: Callable[..., Any]) -> Callable[..., Any]:
    """--duration, --to and --json, shared by ``show`` and every ``from <tool>``."""
    command = click.option(
        "--json", "as_json", is_flag=True,
        help="Print JSON for machines instead of tables.",
    )(command)
    command = click.option(
        "--to", "targets", multiple=True, type=click.Choice([*TOOLS, "all"]),
        help="Also print the equivalent configuration of this tool, with its counting note and "
        "what it cannot express. Repeatable; 'all' for every tool.",
    )(command)
    return click.option(
        "--duration", type=SECONDS, default=0, show_default=True,
        help="Assumed run time of each failed attempt, added to the cumulative start times.",
    )(command)


class _ShowByDefault(click.Group):
    """``twice policy --max-attempts 4`` means ``twice policy show --max-attempts 4``."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        if not args or (args[0].startswith("-") and args[0] not in ctx.help_option_names):
            args = ["show", *args]
        return super().parse_args(ctx, args)


@click.group(cls=_ShowByDefault)
def policy() -> None:
    """Print a retry policy's attempt sequence, and translate it to or from other tools.

    twice counts ATTEMPTS: --max-attempts includes the first try, so --max-attempts 3 means at
    most three executions. Airflow retries, Workflows max_retries, Step Functions MaxAttempts,
    Dagster max_retries and Prefect retries count RETRIES after the first try, so their 3 means
    four executions; Temporal maximum_attempts, tenacity stop_after_attempt and stamina attempts
    count the first try, like twice. Every translation therefore writes out the attempt
    sequence as both sides would run it.

    Delay before attempt n+1 = min(max_delay, initial_delay x multiplier^(n-1)). The planner
    uses it as is; the executor adds jitter: none waits exactly the delay, full waits
    uniform(0, delay), equal waits delay/2 + uniform(0, delay/2): both may shorten a wait, never
    lengthen it; additive waits delay + uniform(0, delay/4): never shorter, up to 25 % longer.

    Without a subcommand the options go to 'show'.

    \b
    Examples:
      twice policy --max-attempts 4 --initial-delay 4 --multiplier 2 --max-delay 12
      twice policy show --max-attempts 4 --duration 20 --to airflow --to stepfunctions
      twice policy from airflow --retries 3 --retry-delay 300 --retry-exponential-backoff
      twice policy from workflows --max-retries 3
      twice policy from stepfunctions --max-attempts 3   # 3 retries: 4 executions
      twice policy from temporal --maximum-attempts 3
      twice policy from tenacity --stop-after-attempt 3 --to all --json
    """


@policy.command("show")
@_setting("--max-attempts", click.IntRange(min=1), _DEFAULT.max_attempts,
          "Total executions INCLUDING the first try (3 = first try + 2 retries).")
@_setting("--initial-delay", SECONDS, _DEFAULT.initial_delay,
          "Delay before the second attempt, in seconds.")
@_setting("--multiplier", MULTIPLIER, _DEFAULT.multiplier,
          "Each further delay is the previous one times this (>= 1).")
@_setting("--max-delay", SECONDS, _DEFAULT.max_delay,
          "Cap on any single delay, in seconds (>= --initial-delay).")
@_setting("--jitter", click.Choice(JITTERS), _DEFAULT.jitter,
          "Executor jitter: none, full, equal or additive (see above).")
@click.option("--attempt-timeout", type=TIMEOUT, default=None,
              help="Per-attempt timeout in seconds; a timed-out attempt's outcome is unknown.")
@_output_options
@click.pass_context
def show(ctx: click.Context, duration: float, targets: tuple[str, ...], as_json: bool,
         **fields: Any) -> None:
    """Print a policy's attempt sequence; --to adds other tools' equivalents.

    \b
    Example:
      twice policy show --max-attempts 4 --initial-delay 4 --multiplier 2 --max-delay 12
    """
    try:
        retry_policy = RetryPolicy(**fields)
    except PolicyError as exc:
        raise _bad_value(ctx, str(exc).split()[0], str(exc)) from None
    _emit(retry_policy, None, duration, targets, as_json)


@policy.group("from", epilog="""\b
Examples:
  twice policy from airflow --retries 3 --retry-delay 300 --to all
  twice policy from tenacity --stop-after-attempt 3 --json
""")
def from_tool() -> None:
    """Translate another tool's retry settings into a twice policy.

    Each subcommand takes the tool's own setting names. The output shows the tool's real
    schedule next to twice's plan and lists what does not carry over.
    """


def _from_command(tool: str, help_text: str,
                  options: Iterable[Callable[[Callable[..., Any]], Callable[..., Any]]]) -> None:
    """Register ``twice policy from <tool>``; option names are the ``from_<tool>`` arguments."""

    @click.pass_context
    def command(ctx: click.Context, duration: float, targets: tuple[str, ...], as_json: bool,
                **settings: Any) -> None:
        try:
            source = FROM[tool](**settings)  # type: ignore[index]
        except TranslationError as exc:
            raise _bad_value(ctx, exc.setting, str(exc)) from None
        _emit(source.policy, source, duration, targets, as_json)

    command = _output_options(command)
    for option in reversed(list(options)):
        command = option(command)
    from_tool.command(tool, help=help_text)(command)


_from_command("airflow", """Airflow task retry settings -> twice.

    Airflow retries counts retries AFTER the first try: --retries 3 means 4 executions. With
    --retry-exponential-backoff Airflow waits b + hash % b seconds, b = ceil(retry_delay x
    2^(try-1)): deterministic per task instance, between 1x and 2x the plain delay.

    \b
    Example:
      twice policy from airflow --retries 3 --retry-delay 300 --retry-exponential-backoff
    """, [
    _setting("--retries", click.IntRange(min=0), 0,
             "Retries after the first try (3 = 4 executions)."),
    _setting("--retry-delay", SECONDS, 300, "retry_delay in seconds."),
    click.option("--retry-exponential-backoff", is_flag=True,
                 help="retry_exponential_backoff=True."),
    click.option("--max-retry-delay", type=Number(allow_none=True), default=None,
                 help="max_retry_delay in seconds (only applies with exponential backoff)."),
    _setting("--retry-delay-multiplier", MULTIPLIER, 2,
             "retry_delay_multiplier (newer Airflow only; older always doubles)."),
    click.option("--execution-timeout", type=TIMEOUT, default=None,
                 help="execution_timeout in seconds."),
])

_from_command("workflows", """Google Cloud Workflows retry block -> twice.

    max_retries excludes the initial execution: --max-retries 3 means 4 executions. Defaults
    are http.default_retry's: 5 retries, 1 s initial delay, x1.25, 60 s cap.

    \b
    Example:
      twice policy from workflows --max-retries 3 --initial-delay 1 --multiplier 2
    """, [
    _setting("--max-retries", click.IntRange(min=0), 5,
             "Retries after the first execution (3 = 4 executions)."),
    _setting("--initial-delay", SECONDS, 1, "backoff.initial_delay in seconds."),
    _setting("--multiplier", MULTIPLIER, 1.25, "backoff.multiplier."),
    _setting("--max-delay", SECONDS, 60, "backoff.max_delay in seconds."),
])

_from_command("stepfunctions", """AWS Step Functions retrier -> twice.

    MaxAttempts counts RETRIES only: --max-attempts 3 (the default) means 4 executions and
    --max-attempts 0 means never retry. Delay = IntervalSeconds x BackoffRate^(n-1), capped by
    MaxDelaySeconds; JitterStrategy FULL waits uniform(0, delay).

    \b
    Example:
      twice policy from stepfunctions --max-attempts 3 --interval-seconds 2 --backoff-rate 2
    """, [
    _setting("--max-attempts", click.IntRange(0, 99999999), 3,
             "MaxAttempts: retries after the first try.", name="MaxAttempts"),
    _setting("--interval-seconds", click.IntRange(min=1), 1,
             "IntervalSeconds (whole seconds).", name="IntervalSeconds"),
    _setting("--backoff-rate", MULTIPLIER, 2.0, "BackoffRate.", name="BackoffRate"),
    click.option("--max-delay-seconds", "MaxDelaySeconds", type=click.IntRange(min=1),
                 default=None, help="MaxDelaySeconds (whole seconds; default: no cap)."),
    _setting("--jitter-strategy", click.Choice(["FULL", "NONE"], case_sensitive=False), "NONE",
             "JitterStrategy.", name="JitterStrategy"),
    click.option("--error-equals", "ErrorEquals", multiple=True, default=["States.ALL"],
                 show_default=True, help="ErrorEquals entry (repeatable)."),
    click.option("--timeout-seconds", "TimeoutSeconds", type=click.IntRange(min=1),
                 default=None, help="The Task state's TimeoutSeconds (per attempt)."),
])

_from_command("temporal", """Temporal RetryPolicy -> twice.

    maximum_attempts counts the first try: --maximum-attempts 3 means 3 executions. Temporal's
    default 0 means unlimited and is refused: twice needs a finite budget. An unset
    maximum_interval is 100 x initial_interval.

    \b
    Example:
      twice policy from temporal --maximum-attempts 5 --initial-interval 1
    """, [
    _setting("--maximum-attempts", click.IntRange(min=0), 0,
             "Total executions including the first; 0 = unlimited."),
    _setting("--initial-interval", Number(above=True), 1.0, "initial_interval in seconds."),
    _setting("--backoff-coefficient", MULTIPLIER, 2.0, "backoff_coefficient."),
    click.option("--maximum-interval", type=Number(allow_none=True), default=None,
                 help="maximum_interval in seconds (default 100 x initial_interval)."),
    click.option("--start-to-close-timeout", type=TIMEOUT, default=None,
                 help="start_to_close_timeout in seconds (per attempt)."),
])

_from_command("tenacity", """tenacity stop/wait strategies -> twice.

    stop_after_attempt(n) counts the first try: --stop-after-attempt 3 means 3 calls. --wait
    picks wait_none (tenacity's default), wait_exponential or wait_random_exponential, with
    multiplier x exp_base^(n-1) clamped to [min, max].

    \b
    Example:
      twice policy from tenacity --stop-after-attempt 5 --wait exponential --wait-max 30
    """, [
    click.option("--stop-after-attempt", type=click.IntRange(min=1), required=True,
                 help="stop_after_attempt(n): total calls including the first."),
    _setting("--wait", click.Choice(["none", "exponential", "random_exponential"]), "none",
             "Wait strategy."),
    _setting("--wait-multiplier", SECONDS, 1, "multiplier= of the wait strategy."),
    click.option("--wait-max", type=Number(allow_none=True), default=None,
                 help="max= of the wait strategy (default: no cap)."),
    _setting("--wait-exp-base", MULTIPLIER, 2, "exp_base= of the wait strategy."),
    _setting("--wait-min", SECONDS, 0, "min= of the wait strategy."),
])

_from_command("stamina", """stamina.retry settings -> twice.

    attempts counts the first try: --attempts 3 means 3 calls. stamina waits
    min(wait_max, wait_initial x wait_exp_base^(n-1) + uniform(0, wait_jitter)) and also stops
    after --timeout seconds in total (45 by default; 'none' to disable).

    \b
    Example:
      twice policy from stamina --attempts 5 --timeout none
    """, [
    _setting("--attempts", click.IntRange(min=0), 10, "Total calls including the first."),
    _setting("--timeout", TIMEOUT, 45.0, "Total time budget in seconds, or 'none'."),
    _setting("--wait-initial", SECONDS, 0.1, "wait_initial in seconds."),
    _setting("--wait-max", SECONDS, 5.0, "wait_max in seconds."),
    _setting("--wait-jitter", SECONDS, 1.0, "wait_jitter in seconds (added to the delay)."),
    _setting("--wait-exp-base", MULTIPLIER, 2.0, "wait_exp_base."),
])


def _bad_value(ctx: click.Context, name: str, message: str) -> click.ClickException:
    """A usage error (exit code 2) that names the command-line option behind ``name``."""
    for param in ctx.command.params:
        if param.name == name and isinstance(param, click.Option):
            return click.BadParameter(message, ctx=ctx, param=param)
    return click.UsageError(message, ctx=ctx)


def _targets(targets: Iterable[str]) -> list[str]:
    """The tools asked for by --to, each once, in the order given ('all' = every tool)."""
    targets = list(targets)
    return list(TOOLS) if "all" in targets else list(dict.fromkeys(targets))


def _plan(retry_policy: RetryPolicy, duration: float) -> list[tuple[int, float, WaitRange, float]]:
    """twice's own rows: attempt, planned delay, executor wait range, earliest start."""
    rows = []
    for plan in itertools.islice(retry_policy.attempts(duration), ROW_LIMIT):
        low, high = (0, 0) if plan.number == 1 else jitter_bounds(retry_policy, plan.number - 1)
        wait = WaitRange(low, high, "fixed" if low == high else "random")
        rows.append((plan.number, plan.delay_before, wait, plan.earliest_start))
    return rows


def _summary(retry_policy: RetryPolicy) -> list[str]:
    p = retry_policy
    lines = [
        f"max_attempts={p.max_attempts} counts the first try: at most {p.max_attempts} "
        f"execution(s), {p.retries} retr{'y' if p.retries == 1 else 'ies'}",
        f"delay before attempt n+1 = min({seconds(p.max_delay)}, {seconds(p.initial_delay)} x "
        f"{seconds(p.multiplier)}^(n-1)); jitter {p.jitter}: {_JITTER_FORMULAS[p.jitter]}",
    ]
    if p.attempt_timeout is not None:
        lines.append(f"attempt_timeout={seconds(p.attempt_timeout)} s: a timed-out attempt's "
                     "outcome is unknown, not failed")
    return lines


def _emit(retry_policy: RetryPolicy, source: Translation | None, duration: float,
          targets: Iterable[str], as_json: bool) -> None:
    translations = [TO[tool](retry_policy) for tool in _targets(targets)]  # type: ignore[index]
    rows = _plan(retry_policy, duration)
    if as_json:
        data: dict[str, Any] = {}
        if source is not None:
            data["source"] = source.to_dict(duration)
        data["policy"] = retry_policy.to_dict()
        data["counting"] = _summary(retry_policy)[0]
        data["executions"] = retry_policy.max_attempts
        data["duration"] = duration
        data["attempts"] = [
            {"attempt": n, "delay_before": delay, "wait": [wait.low, wait.high],
             "earliest_start": start}
            for n, delay, wait, start in rows
        ]
        data["translations"] = [t.to_dict(duration) for t in translations]
        echo(jsonkeys.dumps(data, indent=2))
        return

    from rich.table import Table
    from rich.text import Text

    from twice.cli.console import make_console

    console = make_console()
    if source is not None:
        _print_translation(console, source, duration)
    title = "twice policy" + (f" ({seconds(duration)} s per failed attempt)" if duration else "")
    table = Table(title=title, title_justify="left")
    table.add_column("attempt", justify="right")
    table.add_column("delay before (s)", justify="right")
    table.add_column("with jitter (s)", justify="right")
    table.add_column("earliest start (s)", justify="right")
    for n, delay, wait, earliest in rows:
        table.add_row(str(n), seconds(delay), wait.label(), seconds(earliest))
    console.print(table)
    if retry_policy.max_attempts > ROW_LIMIT:
        console.print(Text(f"... {retry_policy.max_attempts - ROW_LIMIT} more attempts not shown"))
    for line in _summary(retry_policy):
        console.print(Text(line))
    for translation in translations:
        console.print()
        _print_translation(console, translation, duration)


def _print_translation(console: Any, translation: Translation, duration: float) -> None:
    from rich.rule import Rule
    from rich.table import Table
    from rich.text import Text

    name = TOOL_NAMES[translation.tool]
    # a rule fills the console's width: at most a terminal's worth (piped output is not
    # wrapped, so its width is large; twice.cli.console)
    console.print(Rule(Text(translation.title), align="left"), width=min(console.width, 100))
    console.print(Text(translation.snippet))
    console.print(Text(translation.counting, style="bold"))
    table = Table()
    for header in ("attempt", "twice plans", "twice waits", f"{name} waits", "twice start",
                   f"{name} start"):
        table.add_column(header, justify="right")
    for row in translation.rows(duration):
        table.add_row(str(row.number), seconds(row.twice_delay), row.twice_wait.label(),
                      row.tool_wait.label(), seconds(row.twice_start), row.tool_start.label())
    console.print(table)
    if translation.executions > ROW_LIMIT:
        console.print(Text(f"... {translation.executions - ROW_LIMIT} more attempts not shown"))
    if translation.differences:
        console.print(Text("Not expressible / different:"))
        for difference in translation.differences:
            console.print(Text(f"- {difference}"))
