"""The command line: the only layer that prints."""

from __future__ import annotations

import functools
import sys

import click

from pmap_migrate import __version__

EXIT_CLEAN, EXIT_FINDINGS, EXIT_ERROR = 0, 1, 2
OUTPUT_FORMATS = ("text", "concise", "json", "github", "sarif")


def _split_codes(ctx, param, values):
    codes: list[str] = []
    for value in values or ():
        codes.extend(part.strip().upper() for part in value.split(",") if part.strip())
    return codes


def _fail(message: str) -> None:
    click.echo(f"pmap-migrate: error: {message}", err=True)
    sys.exit(EXIT_ERROR)


def handle_errors(command):
    """No traceback reaches the user: internal failures become one line and exit code 2."""

    @functools.wraps(command)
    def wrapper(*args, **kwargs):
        from pmap_migrate.config import ConfigError

        try:
            return command(*args, **kwargs)
        except ConfigError as error:
            _fail(str(error))
        except KeyboardInterrupt:
            click.echo("pmap-migrate: interrupted", err=True)
            sys.exit(130)
        except (click.exceptions.Exit, click.ClickException, SystemExit):
            raise
        except BrokenPipeError:
            sys.exit(EXIT_ERROR)
        except Exception as error:  # pragma: no cover - the last line of defence
            _fail(f"internal error: {type(error).__name__}: {error}")

    return wrapper


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="pmap-migrate")
def main() -> None:
    """Find and migrate legacy jax.pmap code."""
    _tolerant_output_streams()


def entry() -> None:
    """The program (`pmap-migrate`, `python -m pmap_migrate`): `main`, after which Ctrl-C is ignored. The
    work is done and reported by then; an interrupt could only break into Python's shutdown (a
    traceback from `threading`, or a death by SIGINT instead of the exit code)."""
    import signal

    try:
        main()
    except SystemExit as done:  # click's standalone mode always ends so
        code = done.code
    except KeyboardInterrupt:  # landed in click's own start or end, outside the command's handler
        code = 130
    else:  # pragma: no cover
        code = 0
    # An interrupt that lands while SIGINT is being ignored surfaces in `signal.signal` (its Python
    # wrapper): dropped like the ones after it.
    while True:
        try:
            signal.signal(signal.SIGINT, signal.SIG_IGN)
            break
        except KeyboardInterrupt:
            pass
    sys.exit(code)


def _tolerant_output_streams() -> None:
    """File names are bytes on POSIX: one that is not UTF-8 reaches us as surrogate escapes, which
    a strict stream refuses (the run would end in an internal error). Print such names as the
    bytes they are, and anything else a stream cannot encode as an escape."""
    for stream in (sys.stdout, sys.stderr):
        if getattr(stream, "errors", None) != "strict" or not hasattr(stream, "reconfigure"):
            continue
        utf8 = (getattr(stream, "encoding", "") or "").lower().replace("-", "") == "utf8"
        try:
            stream.reconfigure(errors="surrogateescape" if utf8 else "backslashreplace")
        except (ValueError, OSError):  # a stream that cannot change now: leave it
            pass


def selection_options(command):
    options = [
        click.argument("paths", nargs=-1, type=click.Path()),
        click.option("--select", multiple=True, callback=_split_codes, metavar="CODES",
                     help="Rule codes or prefixes to enable (e.g. PM1,PM301); replaces the configured set."),
        click.option("--ignore", multiple=True, callback=_split_codes, metavar="CODES",
                     help="Rule codes or prefixes to disable."),
        click.option("--extend-exclude", multiple=True, metavar="PATTERN",
                     help="More gitignore-style patterns to exclude."),
        click.option("--force-exclude", is_flag=True,
                     help="Apply excludes to paths named on the command line too (for pre-commit)."),
        click.option("--config", "config_file", type=click.Path(dir_okay=False), default=None,
                     help="Use this pyproject.toml (or a TOML file holding the settings table)."),
        click.option("--no-cache", is_flag=True, help="Do not read or write the result cache."),
        click.option("--jobs", "-j", type=click.IntRange(min=1), default=None,
                     help="Processes to use (default: one per core; 1 under pre-commit)."),
        click.option("--stdin-filename", default=None, help="The path to report for input read from `-`."),
        click.option("--quiet", "-q", is_flag=True, help="Print the findings and nothing else."),
    ]
    for option in reversed(options):
        command = option(command)
    return command


_IDIOMATIC_HELP = ("Offer the idiomatic rewrite of a whole data-parallel loop (one mesh, no stacked device axis; "
                   "an unsafe fix) instead of the faithful one where it is recognised; overrides `idiomatic` "
                   "in the config.")


@main.command()
@selection_options
@click.option("--output-format", type=click.Choice(OUTPUT_FORMATS), default="text", show_default=True)
@click.option("--statistics", is_flag=True, help="Print the number of findings per rule instead of each finding.")
@click.option("--exit-zero", is_flag=True, help="Exit 0 even when legacy patterns are found.")
@click.option("--baseline", "baseline_file", type=click.Path(dir_okay=False), default=None, metavar="FILE",
              help="Fail only where a file's count of findings for a rule grew beyond this baseline.")
@click.option("--write-baseline", "write_baseline_file", type=click.Path(dir_okay=False), default=None,
              metavar="FILE", help="Record the current findings as the baseline in FILE and exit 0.")
@click.option("--idiomatic/--no-idiomatic", default=None, help=_IDIOMATIC_HELP)
@handle_errors
def check(paths, select, ignore, extend_exclude, force_exclude, config_file, no_cache, jobs, stdin_filename,
          quiet, output_format, statistics, exit_zero, baseline_file, write_baseline_file, idiomatic):
    """Report legacy pmap patterns in PATHS (default: the current directory; `-` reads stdin)."""
    from pmap_migrate.session import Session

    if baseline_file and write_baseline_file:
        _fail("--baseline and --write-baseline cannot be combined")
    session = Session.create(paths, select=select, ignore=ignore, extend_exclude=extend_exclude,
                             force_exclude=force_exclude, config_file=config_file, idiomatic=idiomatic)
    outcome = session.check(use_cache=not no_cache, jobs=jobs, stdin_filename=stdin_filename,
                            progress=not quiet and output_format in ("text", "concise"))
    diagnostics = outcome.active_with_errors
    if write_baseline_file:
        from pathlib import Path

        from pmap_migrate import baseline

        table = baseline.write(Path(write_baseline_file), diagnostics)
        if not quiet:
            click.echo(f"Wrote a baseline of {len(diagnostics)} finding{'s' if len(diagnostics) != 1 else ''} in "
                       f"{len(table)} file{'s' if len(table) != 1 else ''} to {write_baseline_file}.", err=True)
        sys.exit(EXIT_ERROR if outcome.internal_errors else EXIT_CLEAN)
    verdict = None
    if baseline_file:
        from pathlib import Path

        from pmap_migrate import baseline

        verdict = baseline.compare(Path(baseline_file), diagnostics, checked=[r.path for r in outcome.run.results])
        diagnostics = verdict.new
    held = _held_in_review(session, outcome.run.results, paths).intersection(diagnostics) \
        if output_format in ("text", "concise") and not quiet else ()
    _emit(session, diagnostics, output_format=output_format, statistics=statistics, quiet=quiet,
          files=outcome.run.files, errors=len(outcome.run.errors), held=held)
    if verdict is not None and output_format in ("text", "concise") and not quiet:
        _baseline_summary(verdict, baseline_file)
    if outcome.internal_errors:
        sys.exit(EXIT_ERROR)
    sys.exit(EXIT_FINDINGS if diagnostics and not exit_zero else EXIT_CLEAN)


@main.command()
@selection_options
@click.option("--unsafe-fixes", is_flag=True, help="Also apply fixes that rely on an assumption (stated in each fix).")
@click.option("--diff", is_flag=True, help="Print a unified diff of what would change and write nothing "
              "(exit 1 if anything would change).")
@click.option("--show-fixes", is_flag=True, help="List every fix applied.")
@click.option("--interactive", "-i", is_flag=True, help="Show each fix as a diff and ask: apply, skip or quit.")
@click.option("--output-format", type=click.Choice(OUTPUT_FORMATS), default="text", show_default=True,
              help="Format of the findings left after fixing.")
@click.option("--idiomatic/--no-idiomatic", default=None, help=_IDIOMATIC_HELP + " Needs --unsafe-fixes.")
@click.option("--review-skipped", is_flag=True, help="Disregard the fixes skipped in an earlier review "
              "(.pmap-migrate-skips.json): with --interactive, ask about them again; without it, apply them.")
@handle_errors
def fix(paths, select, ignore, extend_exclude, force_exclude, config_file, no_cache, jobs, stdin_filename,
        quiet, unsafe_fixes, diff, show_fixes, output_format, interactive, idiomatic, review_skipped):
    """Rewrite legacy pmap patterns in PATHS in place (safe fixes; --unsafe-fixes for the rest)."""
    from pmap_migrate.files import write_atomic
    from pmap_migrate.session import Session

    if interactive and diff:
        _fail("--interactive and --diff cannot be combined")
    if idiomatic and not unsafe_fixes and not quiet:
        click.echo("pmap-migrate: warning: --idiomatic rewrites are unsafe fixes and need --unsafe-fixes; "
                   "applying the faithful rewrite", err=True)
    session = Session.create(paths, select=select, ignore=ignore, extend_exclude=extend_exclude,
                             force_exclude=force_exclude, config_file=config_file, idiomatic=idiomatic)
    from pmap_migrate.skips import SkipStore

    skips = SkipStore.load(session.settings.root)  # fixes skipped in review: not asked again, not applied
    skipped, held = [], []
    if interactive:
        from pmap_migrate.interactive import review

        reviewed = review(session.files(use_cache=not no_cache), session.settings, session.rules, unsafe=unsafe_fixes, decide=_ask_about_fix,
                          skips=skips, review_skipped=review_skipped)
        outcomes, skipped, held = reviewed.outcomes, reviewed.skipped, reviewed.held
    else:
        outcomes = session.fix(unsafe=unsafe_fixes, jobs=jobs, progress=not quiet and not diff, use_cache=not no_cache)
        if len(skips) and not review_skipped:
            from pmap_migrate.interactive import honour_skips

            outcomes, held = honour_skips(outcomes, session.settings, session.rules, unsafe=unsafe_fixes, skips=skips)
    changed = [(path, o) for path, o in outcomes if o.changed and o.error is None]
    if diff:
        for path, outcome in changed:
            click.echo(unified_diff(outcome), nl=False)
        if not quiet:
            applied = sum(len(o.applied) for _, o in changed)
            click.echo(f"Would fix {applied} finding{'s' if applied != 1 else ''} in {len(changed)} "
                       f"file{'s' if len(changed) != 1 else ''}.", err=True)
        sys.exit(EXIT_FINDINGS if changed else EXIT_CLEAN)
    written = []
    for path, outcome in changed:
        try:
            write_atomic(path, outcome.fixed, expected=outcome.original)
        except OSError as error:
            # Like an unreadable file: a PM001 finding, and the file keeps (and reports) its findings.
            from pmap_migrate.diagnostics import FileError

            outcome.error = FileError(outcome.path, "PM001",
                                      f"cannot write file: {error.strerror or error}; left unchanged")
            outcome.remaining, outcome.applied, outcome.fixed = [*outcome.applied, *outcome.remaining], [], None
        else:
            written.append((path, outcome))
    changed = written
    remembered = interactive and _save_skips(skips)
    remaining = sorted([d for _, o in outcomes for d in o.remaining]
                       + [o.error.as_diagnostic() for _, o in outcomes if o.error is not None],
                       key=lambda d: d.sort_key())
    applied = [d for path, o in changed for d in o.applied]
    if show_fixes and applied:
        _show_fixes(applied)
    if output_format in ("text", "concise") and not quiet:
        fixed_files = len(changed)
        click.echo(f"Fixed {len(applied)} finding{'s' if len(applied) != 1 else ''} in {fixed_files} "
                   f"file{'s' if fixed_files != 1 else ''}.")
        if skipped:
            click.echo(f"Skipped {len(skipped)} fix{'es' if len(skipped) != 1 else ''} (still reported below):")
            for d in skipped:
                click.echo(f"  {d.location}: {d.code} {d.fix.summary if d.fix else d.message}")
            if remembered:
                click.echo(f"Remembered in {remembered}: `fix` leaves them alone from now on "
                           "(`fix --interactive --review-skipped` asks again).")
        if held:
            click.echo(f"Left {len(held)} fix{'es' if len(held) != 1 else ''} skipped in an earlier review "
                       f"(--review-skipped {'asks again' if interactive else 'applies them'}):")
            for d in held:
                click.echo(f"  {d.location}: {d.code} {d.fix.summary if d.fix else d.message}")
    _emit(session, remaining, output_format=output_format, statistics=False, quiet=quiet,
          files=len(outcomes), errors=sum(1 for _, o in outcomes if o.error is not None),
          held=[*skipped, *held] if remembered or not interactive else ())
    if any(o.error is not None and o.error.code == "PM002" for _, o in outcomes):
        sys.exit(EXIT_ERROR)
    sys.exit(EXIT_FINDINGS if remaining else EXIT_CLEAN)


def _save_skips(skips) -> str | None:
    """Write the record of skipped fixes; its path as shown, or None when it holds nothing."""
    from pmap_migrate.runner import display_path

    shown = display_path(skips.file)
    try:
        skips.save()
    except OSError as error:  # the fixes are written: the run goes on
        click.echo(f"pmap-migrate: warning: cannot write {shown}: {error.strerror or error}; "
                   "this review's skips are not remembered", err=True)
        return None
    return shown if len(skips) else None


def _ask_about_fix(proposal):
    """The --interactive question: the fix as a coloured diff, then apply / skip / quit."""
    from rich.text import Text

    from pmap_migrate.diagnostics import Applicability
    from pmap_migrate.interactive import parse_answer

    console = _console()
    d = proposal.diagnostic
    header = Text()
    header.append(d.location, style="bold")
    header.append(": ")
    header.append(d.code, style="bold red")
    header.append(f" {d.fix.summary}")
    if d.fix.applicability is Applicability.UNSAFE:
        header.append(" [unsafe fix]", style="yellow")
    console.print(header, soft_wrap=True)
    for line in proposal.diff.splitlines():
        style = ("bold" if line.startswith(("---", "+++")) else "cyan" if line.startswith("@@")
                 else "green" if line.startswith("+") else "red" if line.startswith("-") else None)
        console.print(Text(line, style=style or ""), soft_wrap=True, highlight=False)

    def answer(text: str):
        try:
            return parse_answer(text)
        except ValueError:
            raise click.UsageError("answer a, s (optionally followed by the reason for skipping) or q") from None

    try:
        return click.prompt("Apply this fix? [a]pply, [s]kip [reason], [q]uit", value_proc=answer)
    except click.exceptions.Abort:  # end of input: stop asking, keep what was applied
        return parse_answer("q")


def _baseline_summary(verdict, baseline_file: str) -> None:
    console = _console()
    for growth in verdict.grown:
        console.print(f"{growth.path}: {growth.found} x {growth.code}, the baseline allows {growth.allowed}",
                      markup=False, highlight=False)
    if verdict.hidden:
        console.print(f"{verdict.hidden} finding{'s' if verdict.hidden != 1 else ''} within the baseline "
                      f"{baseline_file} not shown.", markup=False, highlight=False)
    if verdict.shrunk:
        console.print(f"{verdict.shrunk} fewer finding{'s' if verdict.shrunk != 1 else ''} than the baseline allows: "
                      f"`pmap-migrate check --write-baseline {baseline_file}` tightens it.", markup=False, highlight=False)


def unified_diff(outcome) -> str:
    import difflib

    from pmap_migrate.notebooks import is_notebook, notebook_diff

    if is_notebook(outcome.path):
        return notebook_diff(outcome.path, outcome.original, outcome.fixed)
    from pmap_migrate.sourcetext import decode

    before = decode(outcome.original).splitlines(keepends=True)
    after = decode(outcome.fixed).splitlines(keepends=True)
    return "".join(difflib.unified_diff(before, after, f"a/{outcome.path}", f"b/{outcome.path}"))


def _show_fixes(applied) -> None:
    from collections import Counter

    click.echo("Fixed:")
    for (path, code, name), count in sorted(Counter((d.path, d.code, d.name) for d in applied).items()):
        click.echo(f"  {path}: {count} x {code} ({name})")


def _held_in_review(session, results, paths) -> set:
    """The findings whose fix plain `fix` leaves alone, skipped in an earlier review (recorded in the
    project's .pmap-migrate-skips.json): the summary does not count them as fixable."""
    from pmap_migrate.config import SKIPS_FILE, ConfigError

    if "-" in paths or not (session.settings.root / SKIPS_FILE).is_file():
        return set()
    from pathlib import Path

    from pmap_migrate.skips import SkipStore, held_in_review

    try:
        skips = SkipStore.load(session.settings.root)
    except ConfigError as error:
        click.echo(f"pmap-migrate: warning: {error}", err=True)
        return set()
    held: set = set()
    for result in results:
        recorded = skips.of_file(result.path)
        if not recorded or result.error is not None:
            continue
        try:
            data = Path(result.path).read_bytes()
        except OSError:
            continue
        held.update(held_in_review(result.diagnostics, data, result.path, recorded))
    return held


def _emit(session, diagnostics, *, output_format, statistics, quiet, files, errors, held=()):
    if output_format == "json":
        from pmap_migrate.reporting.machine import to_json

        click.echo(to_json(diagnostics), nl=False)
        return
    if output_format == "github":
        from pmap_migrate.reporting.machine import to_github

        click.echo(to_github(diagnostics), nl=False)
        return
    if output_format == "sarif":
        from pmap_migrate.reporting.machine import to_sarif

        click.echo(to_sarif(diagnostics, session.rules), nl=False)
        return
    from pmap_migrate.reporting import text

    console = text.plain_output(sys.stdout) or _console()
    if statistics:
        text.render_statistics(console, diagnostics)
    else:
        text.render_diagnostics(console, diagnostics, session.source_line, show_source=output_format == "text")
    if not quiet:
        text.render_summary(console, diagnostics, errors=errors, files=files, held=held)


def _console(stderr: bool = False):
    from rich.console import Console

    return Console(stderr=stderr, highlight=False, soft_wrap=True)


@main.command()
@selection_options
@click.option("--format", "report_format", type=click.Choice(("markdown", "json")), default="markdown",
              show_default=True)
@click.option("--output", "-o", "output_file", type=click.Path(dir_okay=False), default=None, metavar="FILE",
              help="Write the report to FILE instead of stdout.")
@handle_errors
def report(paths, select, ignore, extend_exclude, force_exclude, config_file, no_cache, jobs, stdin_filename,
           quiet, report_format, output_file):
    """A ledger of every legacy site in PATHS and what will become of it (fixable, shimmed, manual, ...)."""
    from pmap_migrate import report as ledger
    from pmap_migrate.session import Session

    session = Session.create(paths, select=select, ignore=ignore, extend_exclude=extend_exclude,
                             force_exclude=force_exclude, config_file=config_file)
    outcome = session.check(use_cache=not no_cache, jobs=jobs, stdin_filename=stdin_filename, progress=not quiet)
    from pmap_migrate.skips import SkipStore

    built = ledger.build(outcome.run, session.rules, skips=SkipStore.load(session.settings.root))
    text = ledger.to_markdown(built) if report_format == "markdown" else ledger.to_json(built)
    if output_file:
        from pathlib import Path

        try:
            Path(output_file).write_text(text, encoding="utf-8")
        except OSError as error:
            _fail(f"cannot write {output_file}: {error.strerror or error}")
        if not quiet:
            click.echo(f"Wrote the migration report ({len(built.sites)} site{'s' if len(built.sites) != 1 else ''}) "
                       f"to {output_file}.", err=True)
    else:
        click.echo(text, nl=False)
    sys.exit(EXIT_ERROR if outcome.internal_errors else EXIT_CLEAN)


@main.command(name="rules")
@click.option("--output-format", type=click.Choice(("text", "json")), default="text", show_default=True)
@handle_errors
def list_rules(output_format):
    """List every rule with its code, name and summary."""
    from pmap_migrate.rules import all_rules

    if output_format == "json":
        import json

        click.echo(json.dumps([
            {"code": r.CODE, "name": r.NAME, "summary": r.summary(), "message": r.MESSAGE} for r in all_rules()
        ], indent=2))
        return
    from rich.table import Table

    table = Table(box=None, pad_edge=False)
    table.add_column("code", style="bold red")
    table.add_column("name", style="bold")
    table.add_column("summary")
    for rule in all_rules():
        table.add_row(rule.CODE, rule.NAME, rule.summary())
    _console().print(table)


@main.command()
@click.argument("code")
@handle_errors
def explain(code):
    """Print the documentation of rule CODE (e.g. PM101, or its name pmap-call)."""
    from pmap_migrate.docs import rule_document
    from pmap_migrate.rules import all_rules

    wanted = code.strip()
    for rule in all_rules():
        if wanted.upper() == rule.CODE or wanted.lower() == rule.NAME:
            document = rule_document(rule)
            console = _console()
            if console.is_terminal:
                from rich.markdown import Markdown

                console.print(Markdown(document))
            else:
                click.echo(document, nl=False)
            return
    _fail(f"unknown rule {code!r}; `pmap-migrate rules` lists them")


if __name__ == "__main__":  # pragma: no cover
    main()
