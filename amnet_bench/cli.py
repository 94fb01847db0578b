"""``amnet-bench``: run one measurement suite, print its table, write its results.

    amnet-bench --list
    amnet-bench SUITE [SUITE OPTIONS] [--out DIR [--no-plots]]
    amnet-bench SUITE --help            the suite's own options
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from . import SUITES, BenchError  # the package: importing it registers every suite
from . import _report as report
from ._plot import require_matplotlib

app = typer.Typer(add_completion=False, rich_markup_mode=None, pretty_exceptions_enable=False)

_EPILOG = """Examples:

\b
  amnet-bench --list
  amnet-bench startup --help
  amnet-bench startup --reps 10 --ranks 1,4,8 --out /tmp/bench-startup

Options after SUITE other than --out and --no-plots are the suite's own
(see SUITE --help).
Every figure is a ratio against a peer measured in the same run: see
docs/benchmarks.md."""


def _fail(msg: str, code: int = 2) -> None:
    print(f"amnet-bench: error: {msg}", file=sys.stderr)
    raise typer.Exit(code)


def _print_version(value: bool) -> None:
    if value:
        print(f"amnet-bench {report.amnet_version()}")
        raise typer.Exit(0)


def _suite_list() -> str:
    width = max(map(len, SUITES), default=0)
    return "\n".join(f"  {name.ljust(width)}  {(fn.__doc__ or '').strip().splitlines()[0]}"
                     for name, fn in sorted(SUITES.items()))


@app.command(context_settings={"allow_extra_args": True, "ignore_unknown_options": True,
                               "help_option_names": []},
             epilog=_EPILOG)
def amnet_bench(
    ctx: typer.Context,
    suite: Annotated[str | None, typer.Argument(metavar="SUITE",
                                                help="The suite to run (see --list).")] = None,
    out: Annotated[Path | None, typer.Option(
        "--out", metavar="DIR",
        help="Write DIR/results.json (machine, config, every sample), DIR/results.md and, "
             "for suites that draw curves or bars, PNG plots (DIR/*.png; needs matplotlib, "
             "checked before the suite runs).")]
        = None,
    no_plots: Annotated[bool, typer.Option(
        "--no-plots", help="With --out: write no PNG plots (and need no matplotlib).")]
        = False,
    list_suites: Annotated[bool, typer.Option("--list", help="List the suites and exit.")]
        = False,
    show_help: Annotated[bool, typer.Option(
        "-h", "--help", help="Show this message and exit; after SUITE, the suite's options.")]
        = False,
    version: Annotated[bool, typer.Option(
        "--version", callback=_print_version, is_eager=True,
        help="Print amnet-bench's version and exit.")] = False,
) -> None:
    """Run a measurement SUITE: print a Markdown table of figures beside their peer."""
    if list_suites:
        print(_suite_list())
        raise typer.Exit(0)
    if show_help and suite is None:
        print(ctx.get_help())
        raise typer.Exit(0)
    if suite is None:
        _fail("give a SUITE to run; suites:\n" + _suite_list())
    if suite not in SUITES:
        _fail(f"unknown suite {suite!r}; suites: {', '.join(SUITES)} (see amnet-bench --list)")
    args = list(ctx.args) + (["--help"] if show_help else [])
    if out is not None and out.exists() and not out.is_dir():
        _fail(f"--out {str(out)!r} exists and is not a directory")
    plots = out is not None and not no_plots and bool(getattr(SUITES[suite], "plots", ()))
    if plots and not show_help:
        try:  # before measuring: a run of minutes must not end in a missing package
            require_matplotlib()
        except BenchError as e:
            _fail(f"{suite}: {e}", code=1)
    try:
        result = SUITES[suite](args, progress=True)
    except BenchError as e:
        _fail(f"{suite}: {e}", code=1)
    date = report.now()
    machine = report.machine_info()
    print(report.markdown(result, machine, date), end="")
    if out is not None:
        try:
            js, md = report.write(out, result, machine, ["amnet-bench", *sys.argv[1:]], date,
                                  plots=not no_plots)
        except BenchError as e:
            _fail(f"{suite}: {e}", code=1)
        pngs = "".join(f", {out / f['file']}" for f in result.get("figures", ())
                       if not no_plots)
        print(f"amnet-bench: wrote {js}, {md}{pngs}", file=sys.stderr)


def main() -> None:
    """Console entry point of ``amnet-bench``."""
    app(prog_name="amnet-bench")


if __name__ == "__main__":
    main()
