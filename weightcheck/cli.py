"""The ``weightcheck`` command line: each command calls the Python API (weightcheck/api.py) and
draws its report (weightcheck/output/) in the format asked for.

Exit status: 0 fine; 1 findings (check errors, compare incompatible); 2 could not do the job
(bad input, unreachable Hub, refused operation, a usage error) — always one line on stderr, never a
traceback, and with ``--format json`` one JSON object on stdout (``error``, ``file``), with
``--format github`` an ``::error`` workflow command.
"""

from __future__ import annotations

import os
import sys

import click

from weightcheck import __version__, api
from weightcheck.errors import UsageError, WeightcheckError
from weightcheck.output import Output, emit
from weightcheck.reports import ErrorReport
from weightcheck.storage.header import DTYPE_OPTIONS

_FORMAT_HELP = {
    "text": "text (default; fits the terminal)",
    "json": "json",
    "markdown": "markdown (GitHub tables)",
    "concise": "concise (one line per finding)",
    "github": "github (workflow commands: annotations)",
}


def _format_of(params: dict) -> str:
    """The output format options ask for, as far as click parsed them: json and github matter
    for an error (a pipeline parses them); anything else is reported as text."""
    if params.get("as_json") or params.get("fmt") == "json":
        return "json"
    return "github" if params.get("fmt") == "github" else "text"


_PROBE = click.Command(
    None,
    params=[click.Option(["--format", "fmt"]), click.Option(["--json", "as_json"], is_flag=True)],
    context_settings={"ignore_unknown_options": True, "allow_extra_args": True},
    add_help_option=False,
)


def _probe(args: list[str]) -> tuple[str, str | None]:
    """(format, command) of a command line click stopped parsing before it reached the format
    options (an unknown command or option): click's parser, told to pass over what it does not
    know and to raise nothing."""
    ctx = _PROBE.make_context("weightcheck", list(args), resilient_parsing=True)
    return _format_of(ctx.params), next((a for a in ctx.args if not a.startswith("-")), None)


class _Command(click.Command):
    """A weightcheck command: an error, from click's parsing or from the work, carries the
    output format asked for and the command's name, so that :class:`_Group` reports it in that
    format (the error report, weightcheck/reports/pages.py ErrorReport)."""

    def parse_args(self, ctx, args):
        given = list(args)  # click's parser consumes the list
        try:
            return super().parse_args(ctx, args)
        except click.UsageError as e:
            fmt = _format_of(ctx.params)
            e.weightcheck = (fmt if fmt != "text" else _probe(given)[0], ctx.info_name)
            raise

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except WeightcheckError as e:
            e.weightcheck = (_format_of(ctx.params), ctx.info_name)
            raise


class _Group(click.Group):
    command_class = _Command

    def main(self, args=None, *rest, **kwargs):  # one line, exit 2, for everything we raise
        argv = list(sys.argv[1:] if args is None else args)
        try:
            return super().main(argv, *rest, **{**kwargs, "standalone_mode": False})
        except WeightcheckError as e:
            _fail(e.line(), e.where, *_asked(e, argv))
        except click.exceptions.NoArgsIsHelpError as e:
            e.show()
            sys.exit(2)
        except click.ClickException as e:
            fmt, command = _asked(e, argv)
            hint = f" (see: weightcheck {command} --help)" if command in self.commands else ""
            _fail(" ".join(e.format_message().split()) + hint, None, fmt, command)
        except (click.exceptions.Abort, KeyboardInterrupt):
            click.echo("weightcheck: interrupted", err=True)
            sys.exit(130)
        except click.exceptions.Exit as e:
            sys.exit(e.exit_code)
        except BrokenPipeError:
            sys.exit(0)
        except Exception as e:  # a bug in weightcheck: still one line unless asked
            if os.environ.get("WEIGHTCHECK_DEBUG"):
                raise
            _fail(
                f"internal error: {type(e).__name__}: {e} "
                "(set WEIGHTCHECK_DEBUG=1 for a traceback; please report it)",
                None,
                *_asked(e, argv),
                prefix="weightcheck: ",
            )


def _asked(e: Exception, argv: list[str]) -> tuple[str, str | None]:
    """The format and command an error is reported in: as the command saw them
    (:class:`_Command`), else as click's parser reads the command line (:func:`_probe`)."""
    return getattr(e, "weightcheck", None) or _probe(argv)


def _fail(line: str, where, fmt: str, command, prefix: str = "weightcheck: error: "):
    line = line.replace("\r", "\\r").replace("\n", "\\n")
    out = emit(ErrorReport(command=command, error=line, file=where), Output(fmt))
    if out:
        click.echo(out)
    click.echo(prefix + line, err=True)
    sys.exit(2)


def token_option(f):
    return click.option(
        "--token",
        envvar="HF_TOKEN",
        default=None,
        show_envvar=True,
        help="Hugging Face token for gated or private repos.",
    )(f)


def output_options(*formats: str):
    """``--format`` (the formats this command renders) and its alias ``--json``."""

    def deco(f):
        f = click.option("--json", "as_json", is_flag=True, help="Same as --format json.")(f)
        return click.option(
            "--format",
            "fmt",
            type=click.Choice(formats),
            default=None,
            help="Output: " + ", ".join(_FORMAT_HELP[x] for x in formats) + ".",
        )(f)

    return deco


def _output(fmt, as_json) -> Output:
    """The one format asked for (``--json`` is ``--format json``)."""
    if as_json and fmt not in (None, "json"):
        raise UsageError(None, f"--json and --format {fmt} ask for two output formats: choose one")
    return Output.to("json" if as_json else fmt or "text")


def _show(report, out: Output, **options) -> None:
    """Print ``report`` in the format asked for (colour only where ``out`` says so)."""
    click.echo(emit(report, out, **options), color=True if out.color else None)


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="weightcheck")
def main():
    """Inspect, compare, check and convert EAGLE-3 drafter checkpoints.

    SRC is a Hub repo id (org/name or org/name@revision), a local folder, or a single
    .safetensors/.bin/.pt file. Headers and config only: weights are not downloaded.
    """


REPORTS = ("text", "json", "markdown")
FINDINGS = ("text", "json", "markdown", "concise", "github")


@main.command()
@click.argument("src")
@click.option("--revision", default=None, help="Hub branch, tag or commit (same as SRC@REV).")
@click.option(
    "--mapping",
    type=click.Path(dir_okay=False),
    default=None,
    help="Your own dialect file (same format as mappings/dialects/*.toml) to read SRC.",
)
@token_option
@output_options(*REPORTS)
def inspect(fmt, as_json, **options):
    """What is in a checkpoint: dialect, architecture, config, tensors."""
    out = _output(fmt, as_json)
    _show(api.inspect(**options), out)  # the options: InspectRequest's fields


@main.command()
@click.argument("a")
@click.argument("b")
@click.option("--revision-a", default=None, help="Hub revision of A (same as A@REV).")
@click.option("--revision-b", default=None, help="Hub revision of B (same as B@REV).")
@click.option(
    "--values",
    is_flag=True,
    help="Read both sides' weights: max |a-b|, relative L2, cosine, byte equality "
    "(needs torch; Hub files are downloaded through the HF cache).",
)
@click.option(
    "--strict",
    is_flag=True,
    help="Also fail on dtype, serving-field and missing-optional-tensor differences.",
)
@token_option
@output_options(*FINDINGS)
def compare(fmt, as_json, **options):
    """Are two drafters the same model? identical / compatible / incompatible.

    Exit 0 for identical or compatible, 1 for incompatible (or any difference with --strict),
    2 when a source cannot be read.
    """
    out = _output(fmt, as_json)
    r = api.compare(**options, progress=True)  # the options: CompareRequest's fields
    _show(r, out)
    sys.exit(r.exit_status)


@main.command()
@click.argument("src")
@click.option(
    "--engine",
    default=None,
    metavar="sglang|vllm[==VERSION]",
    help="Replay this engine's loader (data in mappings/engines/, newest version read "
    "unless ==VERSION names an older one).",
)
@click.option(
    "--target",
    default=None,
    metavar="TARGET",
    help="The target model (Hub id or folder): config and headers only.",
)
@click.option(
    "--training-config",
    default=None,
    metavar="FILE|FOLDER",
    help="A SpecForge-style drafter config (a file, or a folder with config.json): can SRC "
    "initialize exactly that architecture?",
)
@click.option(
    "--allow-partial-init",
    is_flag=True,
    help="With --training-config: another architecture than SRC's is a warning, not an error "
    "(WC905), for a warm start that initializes only part of the model on purpose.",
)
@click.option(
    "--trainer",
    default=None,
    type=click.Choice(["specforge", "speculators"]),
    help="With --training-config: the trainer whose initialization is replayed (SpecForge "
    "0.2.0, speculators 0.9.0; default: the one the training config belongs to).",
)
@click.option(
    "--training-vocab",
    default=None,
    metavar="MAP",
    help="The training run's vocabulary map (a SpecForge vocab-mapping .pt, a speculators "
    "d2t.npy/t2d.npy pair or folder, or a drafter): is it SRC's map? (WC311)",
)
@click.option(
    "--values",
    is_flag=True,
    help="Also read the weights (streamed, needs torch): NaN/Inf, constant tensors, "
    "untrained norms, an lm_head copied from the target.",
)
@click.option(
    "--explain",
    is_flag=True,
    help="Print each finding's detail and the engine's key-by-key tables.",
)
@click.option(
    "--verbose",
    "-v",
    is_flag=True,
    help="Print each finding's detail (the evidence, the engine's code path) under it.",
)
@click.option(
    "--served-as",
    default=None,
    metavar="PATH|HUB_ID",
    help="The model path the engine will be given (--speculative-draft-model-path), when not "
    "SRC as given here: SGLang picks its config parser from it.",
)
@click.option(
    "--live",
    is_flag=True,
    help="Also run the installed engine's own loader (needs --engine, torch and the engine in "
    "this Python) on meta tensors made from the headers, and print its key-by-key table beside "
    "the replay's, with every disagreement.",
)
@click.option("--revision", default=None, help="Hub revision of SRC (same as SRC@REV).")
@token_option
@output_options(*FINDINGS)
def check(explain, verbose, fmt, as_json, **options):
    """The gate before training or serving: every rule, and the engine's own view.

    Exit 0 when no finding is an error, 1 when one is, 2 when SRC could not be checked.
    `weightcheck rule CODE` explains a finding.
    """
    out = _output(fmt, as_json)
    r = api.check(**options, progress=True)  # the options: CheckRequest's fields
    _show(r, out, explain=explain, verbose=verbose)
    sys.exit(r.exit_status)


@main.command()
@click.argument("src")
@click.argument("out")
@click.option(
    "--to",
    "to",
    required=True,
    type=click.Choice(["sglang", "vllm", "speculators"]),
    help="The destination layout (mappings/engines/<to>.toml [output]).",
)
@click.option(
    "--config-from",
    default=None,
    metavar="REF",
    help="Keep SRC's weights, take REF's config (only when compare says compatible).",
)
@click.option(
    "--dtype",
    type=click.Choice(list(DTYPE_OPTIONS)),
    default=None,
    help="Cast floating-point tensors (streamed with torch).",
)
@click.option(
    "--embeddings",
    default="keep",
    metavar="keep|drop|from=TARGET",
    help="Keep SRC's embed_tokens, drop it (the engines use the target's), or take the "
    "target's (only that tensor is read).",
)
@click.option(
    "--lm-head-from",
    default=None,
    metavar="TARGET",
    help="For a drafter without lm_head: gather the target's lm_head rows at the d2t ids. "
    "With --vocab-from: the rows of tokens SRC's head lacks.",
)
@click.option(
    "--vocab-from",
    default=None,
    metavar="REF",
    help="Re-index SRC to REF's vocabulary map (a drafter, a SpecForge vocab-mapping .pt, or "
    "a speculators d2t.npy/t2d.npy pair or folder): d2t/t2d become REF's and each lm_head row "
    "moves to the draft id REF gives its token, byte for byte.",
)
@click.option(
    "--target",
    default=None,
    metavar="TARGET",
    help="The target model: its family decides the aux-id convention conversion; a Hub id is "
    "written as the speculators verifier.",
)
@click.option(
    "--verifier",
    default=None,
    metavar="ID_OR_PATH",
    help="--to speculators: the target's Hub id or path, written as given into "
    "speculators_config.verifier.name_or_path (speculators' from_pretrained loads it).",
)
@click.option(
    "--max-shard-size",
    default="5GB",
    show_default=True,
    help="Largest output file (e.g. 5GB, 500MB, 2GiB).",
)
@click.option(
    "--mapping",
    type=click.Path(dir_okay=False),
    default=None,
    help="Your own dialect file (same format as mappings/dialects/*.toml) to read SRC.",
)
@click.option(
    "--dry-run", is_flag=True, help="Print the plan and what check finds in it; write nothing."
)
@click.option(
    "--allow-errors",
    is_flag=True,
    help="Write OUT even when check finds errors in it (they are still printed; exit 0).",
)
@click.option(
    "--verbose",
    "-v",
    is_flag=True,
    help="Print each of the gate's findings with its detail under it.",
)
@click.option(
    "--force",
    is_flag=True,
    help="Replace OUT if it is a folder weightcheck wrote (or an empty one); anything else "
    "is refused.",
)
@click.option(
    "--fsync",
    is_flag=True,
    help="Flush every file and folder to disk before OUT appears, so OUT survives a "
    "power loss (slower: the disk's write speed, not the page cache's).",
)
@click.option("--revision", default=None, help="Hub revision of SRC (same as SRC@REV).")
@token_option
@output_options(*REPORTS)
def convert(verbose, fmt, as_json, **options):
    """Write SRC in the names and config layout an engine reads, verified, never half-written.

    Gated by check: the planned output goes through `check OUT --engine E` (E: each engine that
    reads the layout; with --target, against it) before anything is written; an error refuses
    the conversion (exit 1, nothing written). Config fields the weights decide are set from
    them: draft_vocab_size, num_hidden_layers, tie_word_embeddings.

    Renamed tensors are copied as byte ranges (no torch, flat memory); every output tensor is
    re-read and checked against its source before OUT appears. Missing parent folders of OUT are
    made; a killed run's leftovers in OUT's folder are removed.
    """
    o = _output(fmt, as_json)
    r = api.convert(**options, progress=True)  # the options: ConvertRequest's fields
    _show(r, o, verbose=verbose)
    if r.exit_status:
        sys.exit(r.exit_status)  # the gate refused: findings above, nothing written


@main.command()
@click.argument("code", required=False)
@click.option("--all", "show_all", is_flag=True, help="List every rule.")
@output_options(*REPORTS)
def rule(code, show_all, fmt, as_json):
    """A check rule's page: what it checks, why, the report behind it, the fix.

    CODE is a code (WC305) or a rule's name (d2t-missing). `--all` lists every rule;
    `--all --format markdown` is docs/rules.md.
    """
    out = _output(fmt, as_json)
    if show_all == bool(code):
        raise UsageError(None, "give a rule CODE, or --all for the list")
    _show(api.rule(code) if code else api.rule_list(), out)


@main.command()
@click.argument("folder", required=False, default=".", metavar="[DIR]")
@output_options("text", "json")
def clean(folder, fmt, as_json):
    """Remove what killed converts left in DIR (default: here).

    A killed convert leaves a hidden .OUT.weightcheck-tmp-PID folder beside OUT; any later convert
    into the same folder removes it too. A leftover of a process still running is kept; an OUT a
    killed --force had set aside is put back when OUT is missing.
    """
    out = _output(fmt, as_json)
    r = api.clean(folder)
    _show(r, out)


@main.command("eval")
@click.argument("drafters", nargs=-1, required=True, metavar="DRAFTER [DRAFTER ...]")
@click.option(
    "--hidden-states",
    "hidden_states",
    required=True,
    metavar="DATA",
    help="SpecForge offline hidden states (rows_*/data_<i>.ckpt[.gz]) or speculators' "
    "hs_<i>.safetensors folder.",
)
@click.option(
    "--target",
    default=None,
    metavar="TARGET",
    help="The target (folder or Hub id): its lm_head, final norm and embedding are read by "
    "ranges. Without it the data's next token stands for the target's top-1.",
)
@click.option(
    "--loss-mask",
    "loss_mask",
    default=None,
    metavar="DATASET",
    help="speculators' preprocessed dataset whose loss_mask column applies (default: the folder "
    "above hidden_states/): for hs_<i>.safetensors moved away from it.",
)
@click.option("--steps", "-k", default=3, show_default=True, type=int, help="Chain length K.")
@click.option("--limit", default=None, type=int, help="Evaluate the first N samples.")
@click.option(
    "--sample",
    default=None,
    type=int,
    metavar="N",
    help="Evaluate N samples drawn at random (the same N for the same --seed, on any machine).",
)
@click.option("--seed", default=0, show_default=True, type=int, help="The seed of --sample.")
@click.option(
    "--device",
    default="auto",
    show_default=True,
    metavar="auto|cpu|cuda[:N]",
    help="Where the drafters run: auto is the first GPU torch sees, else the CPU.",
)
@click.option(
    "--dtype",
    default=None,
    type=click.Choice(list(DTYPE_OPTIONS)),
    help="Compute dtype (default: the config's, as the engine builds it).",
)
@click.option("--baseline-tps", type=float, default=None, help="Tok/s without speculation.")
@click.option("--cycle-ms", type=float, default=None, help="One verify cycle, in ms.")
@click.option("--draft-ms", type=float, default=None, help="Drafting time per cycle, in ms.")
@token_option
@output_options(*REPORTS)
def eval_command(fmt, as_json, **options):
    """How well each DRAFTER predicts the target: per-step accuracy, the expected acceptance
    length and the one walked cycle by cycle as an engine drafts, from saved hidden states (needs
    torch; a GPU is used when present). Several drafters are ranked, in one pass over the data.
    Ctrl-C prints the report of the samples evaluated so far (exit 130)."""
    from weightcheck.reports.eval import EvalInterrupted

    out = _output(fmt, as_json)
    try:
        # the options: EvalRequest's fields (--hidden-states is hidden_states)
        r = api.evaluate(**options, progress=out.fmt != "json")
    except EvalInterrupted as stop:
        _show(stop.report, out)
        d = stop.report.data
        click.echo(
            f"weightcheck: interrupted: the report covers the {d.files} samples evaluated",
            err=True,
        )
        sys.exit(130)
    finally:  # however it ends, the program's teardown is work for nothing once torch is in
        _QUICK_END["asked"] = "torch" in sys.modules
    _show(r, out)


def run():
    """The ``weightcheck`` program (the console script, ``python -m weightcheck``): main, then
    the way out :func:`_end` says."""
    _QUICK_END["asked"] = False
    try:
        out = main()
    except SystemExit as e:
        _end(e.code)
        raise
    _end(0)
    return out


# set by a command whose interpreter teardown is work for nothing: eval, once it imported torch
_QUICK_END = {"asked": False}


def _end(status) -> None:
    """End the program now with ``status`` (as :func:`sys.exit` reads it) when a command asked
    for it; else return (the ordinary exit follows). eval asks once it has imported torch: the
    interpreter's teardown after its report — torch's modules, CUDA's context, the pinned
    buffers freed one by one — cost 0.36 s after a bare ``import torch`` on the build machine,
    1.3 s after a GPU run (docs/eval.md §7). weightcheck's own exit work is done first (the
    mappings' cache saved) and the streams flushed; then ``os._exit``: no other atexit handler
    runs; the report is out, no file is open for writing."""
    if not _QUICK_END["asked"]:
        return
    if status is None:
        code = 0
    elif isinstance(status, int):
        code = status
    else:  # sys.exit("message"): printed, status 1
        print(status, file=sys.stderr)
        code = 1
    kept = sys.modules.get("weightcheck.mappings")
    if kept is not None:
        kept.save()  # its atexit handler: what this process built of the mappings, kept
    loop = sys.modules.get("weightcheck.eval.loop")
    if loop is not None:
        loop.mark("os._exit")
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed pipe: what could be said was
            pass
    os._exit(code)


if __name__ == "__main__":  # pragma: no cover
    run()
