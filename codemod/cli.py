"""The command line: the only layer that prints."""

from __future__ import annotations

import contextlib
import functools
import io
import os
import sys

import click

from pmap_migrate import __version__

EXIT_CLEAN, EXIT_FINDINGS, EXIT_ERROR = 0, 1, 2
OUTPUT_FORMATS = ("text", "concise", "json", "github", "sarif", "junit", "gitlab")
REPORT_FORMATS = ("markdown", "json")


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


def selection_options(quiet_help: str = "Print the findings and nothing else: no progress, no summary."):
    """The options `check`, `fix` and `report` share (``quiet_help``: what ``-q`` means for the command)."""

    def decorate(command):
        options = [
            click.argument("paths", nargs=-1, type=click.Path()),
            click.option("--select", multiple=True, callback=_split_codes, metavar="CODES",
                         help="Rule codes or prefixes to enable (e.g. PM1,PM301); replaces the configured set."),
            click.option("--ignore", multiple=True, callback=_split_codes, metavar="CODES",
                         help="Rule codes or prefixes to disable."),
            click.option("--extend-exclude", multiple=True, metavar="PATTERN",
                         help="More gitignore-style patterns to exclude."),
            click.option("--force-exclude", is_flag=True,
                         help="Apply excludes to paths named on the command line (and to --stdin-filename) too "
                              "(for pre-commit)."),
            click.option("--config", "config_file", type=click.Path(dir_okay=False), default=None,
                         help="Use this pyproject.toml (or a TOML file holding the settings table)."),
            click.option("--no-cache", is_flag=True, help="Do not read or write the result cache."),
            click.option("--jobs", "-j", type=click.IntRange(min=1), default=None,
                         help="Processes to use (default: one per core; 1 under pre-commit)."),
            click.option("--stdin-filename", default=None, metavar="PATH",
                         help="The path of the source read from `-`: shown in findings, and what the "
                              "configuration (per-file-ignores, --force-exclude) is applied to."),
            click.option("--output-file", "-o", "output_file", type=click.Path(dir_okay=False), default=None,
                         metavar="FILE", help="Write what would go to stdout to FILE instead."),
            click.option("--quiet", "-q", is_flag=True, help=quiet_help),
        ]
        for option in reversed(options):
            command = option(command)
        return command

    return decorate


_IDIOMATIC_HELP = ("Offer the idiomatic rewrite of a whole data-parallel loop (one mesh, no stacked device axis; "
                   "an unsafe fix) instead of the faithful one where it is recognised; overrides `idiomatic` "
                   "in the config.")


_SHIM_HELP = ("Fall back to `runtime_shim` (legacy semantics at run time; needs pmap-migrate-shim installed) "
             "where no plain rewrite exists, the default; --no-shim leaves those sites unchanged, each finding "
             "saying why; overrides `shim` in the config.")


_FORMAT_HELP = ("How findings are printed: text, concise (without source lines), json, github (annotations), "
                "sarif, junit (XML test report) or gitlab (Code Quality).")
_DOCS_URL_HELP = ("Where a rule's documentation page is, for SARIF's helpUri: a URL template in which {code} "
                  "stands for the lower-case rule code; overrides `rule-docs-url` in the config.")


@main.command()
@selection_options()
@click.option("--output-format", type=click.Choice(OUTPUT_FORMATS), default="text", show_default=True,
              help=_FORMAT_HELP)
@click.option("--statistics", is_flag=True, help="Print the number of findings per rule instead of each finding.")
@click.option("--exit-zero", is_flag=True, help="Exit 0 even when legacy patterns are found.")
@click.option("--baseline", "baseline_file", type=click.Path(dir_okay=False), default=None, metavar="FILE",
              help="Fail only where a file's count of findings for a rule grew beyond this baseline.")
@click.option("--write-baseline", "write_baseline_file", type=click.Path(dir_okay=False), default=None,
              metavar="FILE", help="Record the current findings as the baseline in FILE and exit 0.")
@click.option("--idiomatic/--no-idiomatic", default=None, help=_IDIOMATIC_HELP)
@click.option("--shim/--no-shim", default=None, help=_SHIM_HELP)
@click.option("--fix", "apply_fixes", is_flag=True, help="Apply the fixes: `pmap-migrate fix` (ruff's spelling).")
@click.option("--unsafe-fixes", is_flag=True, help="With --fix or --diff: also apply the unsafe fixes.")
@click.option("--diff", is_flag=True, help="`pmap-migrate fix --diff`: print what --fix would change, write nothing.")
@click.option("--show-fixes", is_flag=True, help="With --fix or --diff: list each fix applied, with its summary.")
@click.option("--rule-docs-url", default=None, metavar="TEMPLATE", help=_DOCS_URL_HELP)
@handle_errors
def check(paths, select, ignore, extend_exclude, force_exclude, config_file, no_cache, jobs, stdin_filename,
          output_file, quiet, output_format, statistics, exit_zero, baseline_file, write_baseline_file, idiomatic,
          shim, apply_fixes, unsafe_fixes, diff, show_fixes, rule_docs_url):
    """Report legacy pmap patterns in PATHS (default: the current directory; `-` reads stdin).

    With --fix or --diff it is `pmap-migrate fix` (with --unsafe-fixes, --show-fixes); --unsafe-fixes
    alone writes nothing, as in ruff."""
    from pmap_migrate.session import Session

    if baseline_file and write_baseline_file:
        _fail("--baseline and --write-baseline cannot be combined")
    if apply_fixes or diff:
        given = [name for name, value in (("--statistics", statistics), ("--baseline", baseline_file),
                                          ("--write-baseline", write_baseline_file)) if value]
        if given:
            _fail(f"{given[0]} cannot be combined with --fix or --diff")
    session = Session.create(paths, select=select, ignore=ignore, extend_exclude=extend_exclude,
                             force_exclude=force_exclude, config_file=config_file, idiomatic=idiomatic,
                             shim=shim, rule_docs_url=rule_docs_url)
    with _stdout_to(output_file):
        if apply_fixes or diff:
            if idiomatic and not unsafe_fixes and not quiet:
                _idiomatic_warning()
            code = _fix(session, no_cache=no_cache, jobs=jobs, stdin_filename=stdin_filename, quiet=quiet,
                        unsafe_fixes=unsafe_fixes, diff=diff, show_fixes=show_fixes, output_format=output_format)
            sys.exit(EXIT_CLEAN if exit_zero and code == EXIT_FINDINGS else code)
        _check(session, paths, no_cache=no_cache, jobs=jobs, stdin_filename=stdin_filename, quiet=quiet,
               output_format=output_format, statistics=statistics, exit_zero=exit_zero, baseline_file=baseline_file,
               write_baseline_file=write_baseline_file)


def _check(session, paths, *, no_cache, jobs, stdin_filename, quiet, output_format, statistics, exit_zero,
           baseline_file, write_baseline_file):
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
          files=outcome.run.files, held=held)
    if verdict is not None and output_format in ("text", "concise") and not quiet:
        _baseline_summary(verdict, baseline_file)
    if outcome.internal_errors:
        sys.exit(EXIT_ERROR)
    sys.exit(EXIT_FINDINGS if diagnostics and not exit_zero else EXIT_CLEAN)


@main.command()
@selection_options()
@click.option("--unsafe-fixes", is_flag=True, help="Also apply fixes that rely on an assumption (stated in each fix).")
@click.option("--diff", is_flag=True, help="Print a unified diff of what would change and write nothing "
              "(exit 1 if anything would change).")
@click.option("--show-fixes", is_flag=True, help="List each fix applied, with its summary (what it does, and why "
              "a site goes to the shim).")
@click.option("--interactive", "-i", is_flag=True, help="Show each fix as a diff and ask: apply, skip or quit.")
@click.option("--output-format", type=click.Choice(OUTPUT_FORMATS), default="text", show_default=True,
              help="Format of the findings left after fixing (" + _FORMAT_HELP.split(": ", 1)[1].rstrip(".") + ").")
@click.option("--idiomatic/--no-idiomatic", default=None, help=_IDIOMATIC_HELP + " Needs --unsafe-fixes.")
@click.option("--shim/--no-shim", default=None, help=_SHIM_HELP)
@click.option("--review-skipped", is_flag=True, help="Disregard the fixes skipped in an earlier review "
              "(.pmap-migrate-skips.json): with --interactive, ask about them again; without it, apply them.")
@click.option("--rule-docs-url", default=None, metavar="TEMPLATE", help=_DOCS_URL_HELP)
@handle_errors
def fix(paths, select, ignore, extend_exclude, force_exclude, config_file, no_cache, jobs, stdin_filename,
        output_file, quiet, unsafe_fixes, diff, show_fixes, output_format, interactive, idiomatic, shim,
        review_skipped, rule_docs_url):
    """Rewrite legacy pmap patterns in PATHS in place (safe fixes; --unsafe-fixes for the rest).

    `-` reads the source from stdin and writes the fixed source to stdout (the findings left go to
    stderr)."""
    if interactive and diff:
        _fail("--interactive and --diff cannot be combined")
    if interactive and output_file:
        _fail("--interactive and --output-file cannot be combined (the questions go to stdout)")
    from pmap_migrate.session import Session

    session = Session.create(paths, select=select, ignore=ignore, extend_exclude=extend_exclude,
                             force_exclude=force_exclude, config_file=config_file, idiomatic=idiomatic,
                             shim=shim, rule_docs_url=rule_docs_url)
    if interactive and session.reads_stdin:
        _fail("--interactive cannot read stdin; name the files to review")
    if idiomatic and not unsafe_fixes and not quiet:
        _idiomatic_warning()
    with _stdout_to(output_file):
        sys.exit(_fix(session, no_cache=no_cache, jobs=jobs, stdin_filename=stdin_filename, quiet=quiet,
                      unsafe_fixes=unsafe_fixes, diff=diff, show_fixes=show_fixes, output_format=output_format,
                      interactive=interactive, review_skipped=review_skipped))


def _idiomatic_warning() -> None:
    click.echo("pmap-migrate: warning: --idiomatic rewrites are unsafe fixes and need --unsafe-fixes; "
               "applying the faithful rewrite", err=True)


def _fix(session, *, no_cache, jobs, stdin_filename, quiet, unsafe_fixes, diff, show_fixes, output_format,
         interactive=False, review_skipped=False) -> int:
    """`fix` (and `check --fix` / `--diff`): the exit code. Counts as codemod/counts.py defines them:
    the patterns before are what `check` finds in the same files, those left are the findings on
    the fixed code (on the unchanged code, for a file that could not be fixed or written)."""
    if session.reads_stdin:
        return _fix_stdin(session, stdin_filename=stdin_filename, quiet=quiet, unsafe_fixes=unsafe_fixes, diff=diff,
                          show_fixes=show_fixes, output_format=output_format)
    from pmap_migrate.counts import Counts, FixCounts
    from pmap_migrate.files import write_atomic
    from pmap_migrate.skips import SkipStore

    before = session.check(use_cache=not no_cache, jobs=jobs, progress=not quiet and not diff)
    found_before: dict[str, list] = {}
    for result in before.run.results:
        found_before.setdefault(result.path, []).extend(result.active)
    skips = SkipStore.load(session.settings.root)  # fixes skipped in review: not asked again, not applied
    skipped, held = [], []
    if interactive:
        from pmap_migrate.interactive import review

        files = session.files(use_cache=not no_cache)
        reviewed = review(files, session.settings, session.rules, unsafe=unsafe_fixes, decide=_ask_about_fix, shared=True,
                          skips=skips, review_skipped=review_skipped)
        outcomes, skipped, held, looked_at = reviewed.outcomes, reviewed.skipped, reviewed.held, len(files)
    else:
        fixing = session.fix(unsafe=unsafe_fixes, jobs=jobs, progress=not quiet and not diff, use_cache=not no_cache)
        outcomes, looked_at = fixing.outcomes, fixing.files
        if len(skips) and not review_skipped:
            from pmap_migrate.interactive import honour_skips

            outcomes, held = honour_skips(outcomes, session.settings, session.rules, unsafe=unsafe_fixes, skips=skips,
                                          shared=True)
    from pmap_migrate.runner import shared_module_outcomes

    shared = shared_module_outcomes(outcomes)  # the packages' shared modules: written first
    changed = shared + [(path, o) for path, o in outcomes if o.changed and o.error is None]
    if not diff:
        from pmap_migrate.diagnostics import FileError

        written, unwritten = [], set()
        for path, outcome in changed:
            if outcome.shared is not None and os.path.realpath(outcome.shared.file) in unwritten:
                outcome.error = FileError(outcome.path, "PM001", f"cannot write {outcome.shared.file}, the shared "
                                          "module its fixes import; left unchanged")
                outcome.applied, outcome.fixed = [], None
                continue
            try:
                write_atomic(path, outcome.fixed, expected=outcome.original, create=outcome.created)
            except OSError as error:
                # Like an unreadable file: a PM001 line, and the file keeps its findings.
                outcome.error = FileError(outcome.path, "PM001",
                                          f"cannot write file: {error.strerror or error}; left unchanged")
                outcome.applied, outcome.fixed = [], None
                unwritten.add(os.path.realpath(outcome.path))
            else:
                written.append((path, outcome))
        changed = written
        outcomes = [*outcomes, *((path, o) for path, o in shared if o.error is not None)]
    # What is left: the findings on the fixed code; a file that could not be fixed keeps those
    # `check` found in it, with the line saying why.
    left = [e for e in session.problems]
    remaining = []
    rechecked = bool(changed) and not diff
    if rechecked:
        # What is left once the fixed files are written is what `check` finds in them then: a use of
        # an alias another module defines (the project index) is left or gone depending on that
        # module's fix, which the file's own fix does not see. (The cache answers for the files
        # no fix and no index entry changed.)
        after = session.check_files([path for path, outcome in outcomes if outcome.error is None],
                                    use_cache=not no_cache, jobs=jobs)
        remaining += [d for result in after.results for d in result.active]
        left += [result.error for result in after.results if result.error is not None]
    for _, outcome in outcomes:
        if outcome.error is not None:
            left.append(outcome.error)
            remaining += found_before.get(outcome.path, [])
        elif rechecked:
            continue
        elif outcome.changed or outcome.applied:  # --diff: the findings on the code it would write
            remaining += outcome.remaining
        else:  # nothing changed anywhere that could matter: what `check` found
            remaining += found_before.get(outcome.path, [])
    remaining = sorted(remaining + [e.as_diagnostic() for e in left], key=lambda d: d.sort_key())
    counts = FixCounts(Counts.of(before.active_with_errors), Counts.of(remaining), len(changed))
    applied = [d for _, o in changed for d in o.applied]
    if diff:
        for _, outcome in changed:
            click.echo(unified_diff(outcome), nl=False)
        if show_fixes and applied:
            _show_fixes(applied, err=True)
        if not quiet:
            click.echo(counts.line(diff=True), err=True)
        return EXIT_FINDINGS if changed else EXIT_CLEAN
    remembered = interactive and _save_skips(skips)
    if show_fixes and applied:
        _show_fixes(applied)
    if output_format in ("text", "concise") and not quiet:
        click.echo(counts.line(diff=False))
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
    _emit(session, remaining, output_format=output_format, statistics=False, quiet=quiet, files=looked_at,
          held=[*skipped, *held] if remembered or not interactive else (), not_checked="could not be checked or fixed")
    if any(e.code == "PM002" for e in left):
        return EXIT_ERROR
    return EXIT_FINDINGS if remaining else EXIT_CLEAN


def _fix_stdin(session, *, stdin_filename, quiet, unsafe_fixes, diff, show_fixes, output_format) -> int:
    """`fix -`: the fixed source on stdout (the source as it was when nothing changes or it cannot be
    fixed), or with --diff the diff; what is left goes to stderr."""
    from pmap_migrate.counts import Counts, FixCounts

    before = session.check(stdin_filename=stdin_filename)
    outcome = session.fix_stdin(stdin_filename, unsafe=unsafe_fixes)
    changed = outcome.changed and outcome.error is None
    if outcome.error is not None:
        remaining = [*before.run.results[0].active, outcome.error.as_diagnostic()]
    else:
        remaining = list(outcome.remaining)
    remaining.sort(key=lambda d: d.sort_key())
    counts = FixCounts(Counts.of(before.active_with_errors), Counts.of(remaining), int(changed))
    if diff:
        if changed:
            click.echo(unified_diff(outcome), nl=False)
    else:
        stdout = click.get_binary_stream("stdout")
        stdout.write(outcome.fixed if changed else outcome.original)
        stdout.flush()
    applied = outcome.applied if changed else []
    if show_fixes and applied:
        _show_fixes(applied, err=True)
    if not quiet:
        click.echo(counts.line(diff=diff), err=True)
    if not diff:
        _emit(session, remaining, output_format=output_format, statistics=False, quiet=quiet,
              files=before.run.files, err=True, show_source=False, not_checked="could not be checked or fixed")
    if outcome.error is not None and outcome.error.code == "PM002":
        return EXIT_ERROR
    if diff:
        return EXIT_FINDINGS if changed else EXIT_CLEAN
    return EXIT_FINDINGS if remaining else EXIT_CLEAN


@contextlib.contextmanager
def _stdout_to(output_file: str | None):
    """What the command prints to stdout goes to ``output_file`` instead (written when it ends,
    however it ends: its exit code is what the run found)."""
    if output_file is None:
        yield
        return
    captured = io.BytesIO()
    stream = io.TextIOWrapper(captured, encoding="utf-8", errors="surrogateescape", newline="", write_through=True)
    try:
        with contextlib.redirect_stdout(stream):
            yield
    finally:
        stream.flush()
        try:
            with open(output_file, "wb") as handle:
                handle.write(captured.getvalue())
        except OSError as error:
            _fail(f"cannot write {output_file}: {error.strerror or error}")


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
    source = "/dev/null" if outcome.created else f"a/{outcome.path}"
    return "".join(difflib.unified_diff(before, after, source, f"b/{outcome.path}"))


def _show_fixes(applied, err: bool = False) -> None:
    """Each fix applied, with its summary: what it does, and why a site goes to the shim."""
    click.echo("Applied fixes:", err=err)
    for d in sorted(applied, key=lambda d: d.sort_key()):
        unsafe = " [unsafe fix]" if d.fix is not None and d.fix.applicability.value == "unsafe" else ""
        click.echo(f"  {d.location}: {d.code} {d.fix.summary if d.fix is not None else d.message}{unsafe}", err=err)


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


def _emit(session, diagnostics, *, output_format, statistics, quiet, files, held=(), err=False, show_source=None,
          not_checked="could not be checked"):
    """Print ``diagnostics`` (legacy patterns, and lines for files that could not be checked) in
    ``output_format``, to stdout (``err``: stderr), with the summary `check` prints."""
    if output_format not in ("text", "concise"):
        from pmap_migrate.reporting import machine  # the rules' classes (for SARIF): libcst

        rendered = {
            "json": lambda: machine.to_json(diagnostics),
            "github": lambda: machine.to_github(diagnostics),
            "sarif": lambda: machine.to_sarif(diagnostics, session.rules,
                                              machine.rule_docs_template(session.settings.rule_docs_url)),
            "junit": lambda: machine.to_junit(diagnostics, files=files),
            "gitlab": lambda: machine.to_gitlab(diagnostics),
        }[output_format]()
        click.echo(rendered, nl=False, err=err)
        return
    from pmap_migrate.counts import Counts
    from pmap_migrate.reporting import text

    stream = sys.stderr if err else sys.stdout
    console = text.plain_output(stream) or _console(stderr=err)
    if statistics:
        text.render_statistics(console, diagnostics)
    else:
        text.render_diagnostics(console, diagnostics, session.source_line,
                                show_source=output_format == "text" if show_source is None else show_source)
    if not quiet:
        text.render_summary(console, Counts.of(diagnostics, held), files=files, not_checked=not_checked)


def _console(stderr: bool = False):
    from rich.console import Console

    return Console(stderr=stderr, highlight=False, soft_wrap=True)


@main.command()
@selection_options(quiet_help="Show no progress, and no line saying where the report was written.")
@click.option("--output-format", "report_format", type=click.Choice(REPORT_FORMATS), default="markdown",
              show_default=True, help="markdown (a ledger for people) or json.")
@click.option("--format", "format_alias", type=click.Choice(REPORT_FORMATS), default=None, hidden=True)
@click.option("--output", "output_alias", type=click.Path(dir_okay=False), default=None, hidden=True)
@click.option("--shim/--no-shim", default=None, help=_SHIM_HELP)
@handle_errors
def report(paths, select, ignore, extend_exclude, force_exclude, config_file, no_cache, jobs, stdin_filename,
           output_file, quiet, report_format, format_alias, output_alias, shim):
    """A ledger of every legacy site in PATHS and what will become of it (fixable, shimmed, manual, ...)."""
    from pmap_migrate import report as ledger
    from pmap_migrate.session import Session

    report_format = format_alias or report_format
    output_file = output_file or output_alias
    session = Session.create(paths, select=select, ignore=ignore, extend_exclude=extend_exclude,
                             force_exclude=force_exclude, config_file=config_file, shim=shim)
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
            click.echo(f"Wrote the migration report ({built.counts.found() or 'no legacy patterns'}) "
                       f"to {output_file}.", err=True)
    else:
        click.echo(text, nl=False)
    sys.exit(EXIT_ERROR if outcome.internal_errors else EXIT_CLEAN)


@main.command(name="rules")
@click.option("--output-format", type=click.Choice(("text", "json")), default="text", show_default=True)
@handle_errors
def list_rules(output_format):
    """List every rule: its code, name, whether its findings carry a fix (always, sometimes, never)
    and summary."""
    from pmap_migrate.rules import all_rules

    if output_format == "json":
        import json

        click.echo(json.dumps([
            {"code": r.CODE, "name": r.NAME, "fixable": r.FIXABLE.value, "summary": r.summary(), "message": r.MESSAGE}
            for r in all_rules()
        ], indent=2))
        return
    rows = [(rule.CODE, rule.NAME, rule.FIXABLE.value, rule.summary()) for rule in all_rules()]
    header = ("code", "name", "fix", "summary")
    from pmap_migrate.reporting import text

    if text.plain_output(sys.stdout) is not None:  # a pipe or a file: one line per rule, never wrapped
        widths = [max(len(row[i]) for row in [header, *rows]) for i in range(3)]
        for row in [header, *rows]:
            click.echo("  ".join(cell.ljust(width) for cell, width in zip(row, widths)) + "  " + row[3])
        return
    from rich.table import Table

    table = Table(box=None, pad_edge=False)
    table.add_column("code", style="bold red", no_wrap=True)
    table.add_column("name", style="bold", no_wrap=True)
    table.add_column("fix", no_wrap=True)
    table.add_column("summary")
    for row in rows:
        table.add_row(*row)
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
