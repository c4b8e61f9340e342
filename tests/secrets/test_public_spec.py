"""The public identity of a destination spec (``twice.core.secrets``): no password, idempotent,
unchanged for specs without one; and the registry that connects with the real credentials."""

from __future__ import annotations

import string
from datetime import UTC, datetime
from pathlib import Path
from urllib.parse import quote

import pytest
from hypothesis import given
from hypothesis import strategies as st

from twice.core import secrets
from twice.core.secrets import public_spec, redact, remember, secrets_of, with_credentials

# Passwords as people type them: any printable character, percent-encoded into the URL.
PASSWORDS = st.text(string.ascii_letters + string.digits + string.punctuation + " é", min_size=1,
                    max_size=24)
WORDS = st.text(string.ascii_lowercase + string.digits + "_", min_size=1, max_size=10)
QUERIES = st.lists(st.sampled_from(["partition_column=day", "key_columns=a,b",
                                    "sslmode=require", "connect_timeout=5"]), max_size=3)


@st.composite
def specs(draw: st.DrawFn) -> tuple[str, str]:
    """A PostgreSQL destination spec with a password, and that password as typed."""
    password = "Z" + draw(PASSWORDS)  # upper-case Z appears nowhere else in these specs
    user, db, table = draw(WORDS), draw(WORDS), draw(WORDS)
    port = draw(st.sampled_from(["", ":5432"]))
    query = draw(QUERIES)
    in_query = draw(st.booleans())
    encoded = quote(password, safe="")
    userinfo = user if in_query else f"{user}:{encoded}"
    if in_query:
        query = [*query, f"password={encoded}"]
    text = "&".join(query)
    spec = f"postgresql://{userinfo}@db.example{port}/{db}{'?' + text if text else ''}#{table}"
    return spec, password


@given(specs())
def test_public_spec_never_holds_the_password_and_is_idempotent(case: tuple[str, str]) -> None:
    spec, password = case
    public = public_spec(spec)
    assert quote(password, safe="") not in public and password not in public
    assert "Z" not in public and "password=" not in public
    assert public_spec(public) == public
    assert public.endswith(spec.rpartition("#")[2])  # the table is kept
    assert secrets_of(public) == ()
    assert password in secrets_of(spec)


@given(WORDS, WORDS, QUERIES)
def test_a_spec_without_a_password_is_its_own_identity(user: str, db: str, query: list[str]
                                                       ) -> None:
    text = "&".join(query)
    spec = f"postgresql://{user}@host:5432/{db}{'?' + text if text else ''}#public.t"
    assert public_spec(spec) == spec  # existing ledgers keep their keys


@pytest.mark.parametrize("spec", [
    "sqlite:///data/out.db?partition_column=day#positions", "sqlite:rel/out.db#t",
    "duckdb:///w.duckdb#s.t", "parquet:///data/positions?overwrite=dynamic",
    "bq:project.dataset.table", "postgresql://host/db#t", "postgresql://etl@host/db#t", "",
    "postgresql://etl:@host/db#t",  # an empty password is no secret
])
def test_specs_without_secrets_are_unchanged(spec: str) -> None:
    assert public_spec(spec) == spec


@pytest.mark.parametrize(("spec", "public"), [
    ("postgresql://etl:s3cret@db:5432/wh?partition_column=day#public.t",
     "postgresql://etl@db:5432/wh?partition_column=day#public.t"),
    ("postgres://:s3cret@db/wh#t", "postgres://db/wh#t"),
    ("postgresql://etl@db/wh?sslmode=require&password=s3cret&partition_column=day#t",
     "postgresql://etl@db/wh?sslmode=require&partition_column=day#t"),
    ("postgresql://etl:p%40ss@db/wh?PASSWORD=x#t", "postgresql://etl@db/wh#t"),
    # a relative file spec, without an authority
    ("duckdb:x.duckdb?partition_column=day&password=s3cret#t",
     "duckdb:x.duckdb?partition_column=day#t"),
    # a URL given as a query value, as written or percent-encoded
    ("iceberg:///w/ice?catalog_uri=postgresql://etl:s3cret@h:5432/cat&partition_column=day#n.t",
     "iceberg:///w/ice?catalog_uri=postgresql://etl@h:5432/cat&partition_column=day#n.t"),
    ("iceberg:///w/ice?catalog_uri=postgresql%3A%2F%2Fetl%3As3cret%40h%2Fcat#n.t",
     "iceberg:///w/ice?catalog_uri=postgresql%3A%2F%2Fetl%40h%2Fcat#n.t"),
])
def test_public_spec_examples(spec: str, public: str) -> None:
    assert public_spec(spec) == public
    assert secrets_of(spec) and public_spec(public) == public


def test_a_task_keeps_the_public_identity_and_connects_with_the_password() -> None:
    from twice import Pipeline, Schedule, TaskContext
    from twice.core.interval import Interval

    spec = "postgresql://etl:Reg1stered-pw@db.example/wh?partition_column=day#public.t"
    pipeline = Pipeline("p", schedule=Schedule.daily("UTC"))

    @pipeline.task(destination=spec)
    def load(ctx: TaskContext) -> None:
        return None

    task = pipeline.get_task("load")
    public = "postgresql://etl@db.example/wh?partition_column=day#public.t"
    assert task.destination == public and "Reg1stered-pw" not in repr(task)
    day = datetime(2026, 11, 30, tzinfo=UTC)
    unit = pipeline.unit_of_work("load", Interval(day, day.replace(day=1, month=12)))
    assert unit.destination == public and "Reg1stered-pw" not in repr(unit.identity())
    assert with_credentials(public) == spec  # what open_destination connects with
    assert with_credentials("postgresql://other@db/wh#t") == "postgresql://other@db/wh#t"
    assert redact("FATAL: bad token near 'Reg1stered-pw'") == "FATAL: bad token near '***'"


def test_redact_masks_urls_and_pairs_it_was_never_told_about() -> None:
    assert redact("cannot open postgresql+psycopg://u:hunter2@h/db: timeout") == (
        "cannot open postgresql+psycopg://u:***@h/db: timeout")
    assert redact("host=h password=hunter2 dbname=x") == "host=h password=*** dbname=x"
    assert redact("password='two words' x") == "password=*** x"
    assert redact("no secret at https://example.com/a:b@c") != ""


def test_a_ledger_url_is_shown_without_any_form_of_its_password() -> None:
    """libpq takes a password in the user part or as ``?password=``; one holding an unescaped
    ``@`` is masked whole, not up to its first ``@``."""
    from twice.ledger.engine import mask_url, resolve_url

    for url, shown in [
        ("postgresql://bob@h:5432/db?password=S3CRET", "postgresql+psycopg://bob@h:5432/db"
                                                      "?password=***"),
        ("postgresql://bob:S3C@RETX@h:5432/db", "postgresql+psycopg://bob:***@h:5432/db"),
        ("postgresql://bob@h/db?sslmode=require&sslpassword=S3CRET",
         "postgresql+psycopg://bob@h/db?sslmode=require&sslpassword=***"),
    ]:
        assert mask_url(resolve_url(url)) == shown
        assert "S3C" not in mask_url(url) and "RETX" not in mask_url(url)
    assert redact("at postgresql://u:p@ss@h/db, mail a@b.c") == (
        "at postgresql://u:***@h/db, mail a@b.c")


def test_a_ledger_url_keeps_a_user_name_that_is_also_a_registered_password() -> None:
    """The development default, ``postgresql://twice:twice@...``: once a destination registers
    the password ``twice``, a ledger's name still shows its user (only its password masked)."""
    from twice.ledger.engine import mask_url, resolve_url

    remember("postgresql://twice:twice@127.0.0.1:5432/wh#public.t")
    assert mask_url(resolve_url("postgresql://twice:twice@127.0.0.1:1/nowhere")) == (
        "postgresql+psycopg://twice:***@127.0.0.1:1/nowhere")
    # it is also the user's name, which the public spec shows: free text keeps it readable
    # (a message naming user or database "twice"), and still masks it as a URL's password
    assert redact("password authentication failed for user \"twice\"") == (
        "password authentication failed for user \"twice\"")
    assert redact("postgresql://twice:twice@h/db") == "postgresql://twice:***@h/db"
    remember("postgresql://etl:twice2@127.0.0.1:5432/wh#public.t")
    assert redact("password twice2") == "password ***"  # any other password: masked


def test_remember_of_a_public_spec_registers_nothing() -> None:
    before = dict(secrets._registered)
    assert remember("postgresql://etl@db/wh#t") == "postgresql://etl@db/wh#t"
    assert secrets._registered == before


@pytest.mark.parametrize("command", ["status", "update", "handover", "report --json"])
def test_an_unreachable_ledger_is_named_without_its_password(command: str) -> None:
    """The error for a ledger that cannot be opened names it, never with its password."""
    import subprocess
    import sys

    url = "postgresql://bob:s3cretpw@127.0.0.1:9/none"
    done = subprocess.run([sys.executable, "-m", "twice", *command.split(), "--ledger", url],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode != 0
    assert "s3cretpw" not in done.stdout + done.stderr
    assert "127.0.0.1:9" in done.stdout + done.stderr


def test_a_registered_password_is_masked_as_a_token_not_inside_words() -> None:
    """``postgresql://postgres:postgres@localhost/db`` is the most common development spec:
    its password must be masked wherever it stands on its own, but the words that merely
    contain it (``postgresql``) stay readable."""
    remember("postgresql://etl:postgres@localhost/wh?partition_column=day#public.t")
    assert redact("cannot reach postgresql://etl@localhost/wh") == (
        "cannot reach postgresql://etl@localhost/wh")
    assert redact("auth failed: 'postgres' rejected") == "auth failed: '***' rejected"
    assert redact("postgres") == "***"
    assert redact("key postgres_old and postgres2") == "key postgres_old and postgres2"
    remember("postgresql://etl:s3cr%21t@localhost/wh#public.u")  # "s3cr!t" decoded
    # a secret that is not a plain word is masked wherever it appears, even inside a word
    assert redact("got s3cr!t, s3cr%21t and xs3cr!t") == "got ***, *** and x***"


@pytest.mark.parametrize("command", ["status", "run"])
def test_a_libpq_keyword_string_as_ledger_is_refused_without_its_password(
    command: str, tmp_path: Path
) -> None:
    """Found by a probe: ``--ledger "host=h user=u password=pw dbname=x"`` was taken for a
    file path: ``status`` printed it, ``run`` created a file named after the password."""
    from click.testing import CliRunner

    from twice.cli import cli

    pipeline = tmp_path / "p.py"
    pipeline.write_text("from twice import Pipeline, Schedule\n"
                        "pipeline = Pipeline('p', schedule=Schedule.daily('UTC'))\n"
                        "@pipeline.task(safe_repeat=True)\ndef t(ctx):\n    pass\n")
    args = {"status": ["status"],
            "run": ["run", str(pipeline), "--interval", "2026-11-01", "--deadline", "none"]}
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(tmp_path)
        done = CliRunner().invoke(cli, [*args[command], "--ledger",
                                        "host=127.0.0.1 user=u password=WrDsn5 dbname=x"])
    assert done.exit_code == 2, done.output
    assert "WrDsn5" not in done.output and "Traceback" not in done.output
    assert sorted(p.name for p in tmp_path.iterdir()) == ["p.py"]


def test_a_pipeline_file_failing_at_import_is_reported_without_the_password(
    tmp_path: Path,
) -> None:
    from twice.define.load import PipelineFileError, load_pipeline

    path = tmp_path / "raises.py"
    path.write_text('raise RuntimeError("cannot connect postgresql://u:hunter2@h/db")\n')
    with pytest.raises(PipelineFileError) as caught:
        load_pipeline(str(path))
    assert "hunter2" not in str(caught.value) and "cannot connect" in str(caught.value)
