"""The ``weightcheck`` command line. Each command is a short pipeline:
load -> normalize -> (compare | check | plan+write) -> render.

Exit status: 0 fine; 1 findings (check errors, compare incompatible); 2 could not do the job
(bad input, unreachable Hub, refused operation) — always one line on stderr, never a traceback.
"""

from __future__ import annotations

import os
import sys

import click

from weightcheck import __version__
from weightcheck.errors import WeightcheckError

TABLE_FORMAT = "simple"


class _Group(click.Group):
    def main(self, *args, **kwargs):  # one line, exit 2, for everything we raise
        kwargs.setdefault("standalone_mode", True)
        try:
            return super().main(*args, **{**kwargs, "standalone_mode": False})
        except WeightcheckError as e:
            click.echo(f"weightcheck: error: {e.line()}", err=True)
            sys.exit(2)
        except click.exceptions.Abort:
            click.echo("weightcheck: interrupted", err=True)
            sys.exit(130)
        except KeyboardInterrupt:
            click.echo("weightcheck: interrupted", err=True)
            sys.exit(130)
        except click.ClickException as e:
            e.show()
            sys.exit(2)
        except click.exceptions.Exit as e:
            sys.exit(e.exit_code)
        except BrokenPipeError:
            sys.exit(0)
        except Exception as e:  # a bug in weightcheck: still one line unless asked
            if os.environ.get("WEIGHTCHECK_DEBUG"):
                raise
            click.echo(
                f"weightcheck: internal error: {type(e).__name__}: {e} "
                "(set WEIGHTCHECK_DEBUG=1 for a traceback; please report it)",
                err=True,
            )
            sys.exit(2)


def token_option(f):
    return click.option(
        "--token",
        envvar="HF_TOKEN",
        default=None,
        show_envvar=True,
        help="Hugging Face token for gated or private repos.",
    )(f)


def output_options(f):
    f = click.option(
        "--markdown",
        "as_markdown",
        is_flag=True,
        help="Markdown (for a PR description or model card).",
    )(f)
    f = click.option("--json", "as_json", is_flag=True, help="Machine-readable JSON.")(f)
    return f


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="weightcheck")
def main():
    """Inspect, compare, check and convert EAGLE-3 drafter checkpoints.

    SRC is a Hub repo id (org/name or org/name@revision), a local folder, or a single
    .safetensors/.bin/.pt file. Headers and config only: weights are not downloaded.
    """


@main.command()
@click.argument("src")
@click.option("--revision", default=None, help="Hub branch, tag or commit (same as SRC@REV).")
@token_option
@output_options
def inspect(src, revision, token, as_json, as_markdown):
    """What is in a checkpoint: dialect, architecture, config, tensors."""
    from weightcheck import render
    from weightcheck.commands import inspect as inspect_mod
    from weightcheck.model.drafter import load_drafter

    d = load_drafter(src, revision=revision, token=token)
    r = inspect_mod.report(d)
    if as_json:
        click.echo(render.to_json(r))
    else:
        click.echo(render.inspect_text(r, "github" if as_markdown else TABLE_FORMAT))


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
@output_options
def compare(a, b, revision_a, revision_b, values, strict, token, as_json, as_markdown):
    """Are two drafters the same model? identical / compatible / incompatible.

    Exit 0 for identical or compatible, 1 for incompatible (or any difference with --strict),
    2 when a source cannot be read.
    """
    from weightcheck import render
    from weightcheck.commands import compare as compare_mod
    from weightcheck.model.drafter import load_drafter

    if values:
        _require_torch("--values")
    da = load_drafter(a, revision=revision_a, token=token)
    db = load_drafter(b, revision=revision_b, token=token)
    c = compare_mod.compare(da, db, values=values, progress=not as_json)
    r = compare_mod.report(c, values=values, strict=strict)
    if as_json:
        click.echo(render.to_json(r))
    else:
        click.echo(render.compare_text(r, "github" if as_markdown else TABLE_FORMAT))
    sys.exit(r["exit_status"])


@main.command()
@click.argument("src")
@click.option(
    "--engine",
    "engine_spec",
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
    type=click.Path(dir_okay=False),
    default=None,
    help="A SpecForge-style drafter config: can SRC initialize exactly that architecture?",
)
@click.option(
    "--values",
    is_flag=True,
    help="Also read the weights (streamed, needs torch): NaN/Inf, constant tensors, "
    "untrained norms, an lm_head copied from the target.",
)
@click.option("--explain", is_flag=True, help="Print the engine's key-by-key table.")
@click.option("--revision", default=None, help="Hub revision of SRC (same as SRC@REV).")
@token_option
@output_options
def check(
    src,
    engine_spec,
    target,
    training_config,
    values,
    explain,
    revision,
    token,
    as_json,
    as_markdown,
):
    """The gate before training or serving: every rule, and the engine's own view.

    Exit 0 when no finding is an error, 1 when one is, 2 when SRC could not be checked.
    Rules: docs/rules.md.
    """
    from weightcheck import render
    from weightcheck.commands import check as check_mod
    from weightcheck.model.drafter import load_drafter
    from weightcheck.model.target import load_target

    engine, version = None, None
    if engine_spec:
        engine, _, version = engine_spec.partition("==")
        from weightcheck.engines import view as engine_mod

        data = engine_mod.load(engine)
        if version and version not in data["engine"]["versions_read"]:
            raise WeightcheckError(
                None,
                f"{engine} {version} was not read; versions known: "
                f"{', '.join(data['engine']['versions_read'])}",
            )
    if values:
        _require_torch("--values")
    d = load_drafter(src, revision=revision, token=token)
    t = load_target(target, token=token) if target else None
    ctx, findings = check_mod.run(
        d,
        engine=engine,
        engine_version=version or None,
        target=t,
        training_config=training_config,
        values=values,
    )
    r = check_mod.report(ctx, findings)
    if as_json:
        click.echo(render.to_json(r))
    else:
        click.echo(render.check_text(r, "github" if as_markdown else TABLE_FORMAT, explain))
    sys.exit(0 if r["ok"] else 1)


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
    type=click.Choice(["bf16", "fp16", "fp32"]),
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
    help="For a drafter without lm_head: gather the target's lm_head rows at the d2t ids.",
)
@click.option(
    "--target",
    default=None,
    metavar="TARGET",
    help="The target model: its family decides the aux-id convention conversion.",
)
@click.option(
    "--max-shard-size",
    default="5GB",
    show_default=True,
    help="Largest output file (e.g. 5GB, 500MB, 2GiB).",
)
@click.option(
    "--mapping",
    "mapping_file",
    type=click.Path(dir_okay=False),
    default=None,
    help="Your own dialect file (same format as mappings/dialects/*.toml) to read SRC.",
)
@click.option("--dry-run", is_flag=True, help="Print the plan; write nothing.")
@click.option("--force", is_flag=True, help="Replace OUT if it exists.")
@click.option(
    "--fsync",
    is_flag=True,
    help="Flush every file and folder to disk before OUT appears, so OUT survives a "
    "power loss (slower: the disk's write speed, not the page cache's).",
)
@click.option("--revision", default=None, help="Hub revision of SRC (same as SRC@REV).")
@token_option
@click.option("--json", "as_json", is_flag=True, help="Machine-readable JSON.")
def convert(
    src,
    out,
    to,
    config_from,
    dtype,
    embeddings,
    lm_head_from,
    target,
    max_shard_size,
    mapping_file,
    dry_run,
    force,
    fsync,
    revision,
    token,
    as_json,
):
    """Write SRC in the names and config layout an engine reads, verified, never half-written.

    Renamed tensors are copied as byte ranges (no torch, flat memory); every output tensor is
    re-read and checked against its source before OUT appears.
    """
    from weightcheck import render
    from weightcheck.commands import convert as convert_mod
    from weightcheck.mappings import load_toml_file
    from weightcheck.model.dialects import dialect_from_data
    from weightcheck.model.drafter import load_drafter
    from weightcheck.model.target import load_target

    if embeddings not in ("keep", "drop") and not embeddings.startswith("from="):
        raise WeightcheckError(None, f"--embeddings {embeddings!r}: use keep, drop or from=TARGET")
    extra = ()
    if mapping_file:
        extra = (dialect_from_data(load_toml_file(mapping_file), mapping_file),)
    shard_size = convert_mod.parse_size(max_shard_size)
    if dtype:
        _require_torch("--dtype")
    d = load_drafter(src, revision=revision, token=token, extra_dialects=extra)
    if not dry_run:
        convert_mod.clean_stale(out)  # a killed run's leftovers (and an OUT it had set aside)
        convert_mod.check_paths(d, out, force)
    ref = load_drafter(config_from, token=token) if config_from else None
    tgt = load_target(target, token=token) if target else None
    emb = load_target(embeddings[5:], token=token) if embeddings.startswith("from=") else None
    head = load_target(lm_head_from, token=token) if lm_head_from else None
    if any(it for it in (d.source.files.values()) if it.format == "pickle"):
        _require_torch("converting a pickled checkpoint")
    p = convert_mod.plan(
        d,
        to,
        out,
        dtype=dtype,
        embeddings=embeddings,
        lm_head_from=head,
        config_from=ref,
        max_shard_size=shard_size,
        target=tgt,
        embed_target=emb,
    )
    r = convert_mod.plan_report(p)
    if dry_run:
        click.echo(render.to_json(r) if as_json else render.convert_text(r, dry_run=True))
        return
    bar = None
    total = sum(it.nbytes for it in p.items)
    if total > (256 << 20) and not as_json and sys.stderr.isatty():
        from huggingface_hub.utils import tqdm  # huggingface_hub's own tqdm: no new dependency

        bar = tqdm(total=total, unit="B", unit_scale=True, desc="convert", leave=False)
    try:
        summary = convert_mod.write(
            p, force=force, progress=bar.update if bar else None, fsync=fsync
        )
    finally:
        if bar:
            bar.close()
    r["written"] = summary
    click.echo(render.to_json(r) if as_json else render.convert_text(r, dry_run=False))


def _require_torch(what: str) -> None:
    try:
        import torch  # noqa: F401
    except ImportError:
        raise WeightcheckError(
            None, f"{what} needs torch: pip install 'weightcheck[torch]'"
        ) from None


def run():
    """The ``weightcheck`` program (the console script, ``python -m weightcheck``): :func:`main`,
    then ``gc.freeze()`` on the way out, however it ends. The process is exiting, so nothing left
    needs collecting; without it the interpreter's last garbage collection walks every object
    (numpy's too, once convert has re-opened its output with the safetensors library): 16 ms of a
    150 ms conversion of a small drafter (BENCHMARKS.md, convert). Only here, not in :func:`main`,
    which tests and other programs call in a process that goes on."""
    import gc

    try:
        return main()
    finally:
        gc.freeze()


if __name__ == "__main__":  # pragma: no cover
    run()
