"""The option types shared by several commands, declared once; `with_config_options`, which
makes the run commands' options from the config fields' metadata (`config.sections.option`); and
`resolve_config`, the one way raw, encode, chatml and their Primus aliases turn their options
into a `RunConfig`.

Options mirror shardcook.config (YAML key = option name with `_`); an option given on the
command line beats the --config file, which beats the defaults shown in --help.
"""

from __future__ import annotations

import dataclasses
import inspect
import typing
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, TypeVar

import typer

from shardcook.config.sections import SOURCE, option_field
from shardcook.fields import CLI, CliOption

if TYPE_CHECKING:
    from shardcook.config import RunConfig

DatasetArg = Annotated[str, typer.Argument(
    help="The dataset folder, or its URL (msc://PROFILE/path, s3://bucket/path).",
    show_default=False)]

ConfigOpt = Annotated[Path | None, typer.Option(
    help="YAML config (sections source, output, image, model, data_format).")]
PrintConfigOpt = Annotated[bool, typer.Option(
    "--print-config", help="Print the resolved config and exit.")]
ChatmlInputOpt = Annotated[str | None, typer.Option(
    "--input",
    help="A JSONL file: one record per line with images/image, videos/video, audio and a "
         "conversation (or question/answer fields); paths relative to the file.",
    rich_help_panel=SOURCE)]
# Primus's spellings (`primus-cli direct -- data diffusion-raw|diffusion-encoded`), as aliases.
PRIMUS = "Primus aliases"
PRIMUS_ALIASES: dict[str, Any] = {
    "center_crop": Annotated[bool | None, typer.Option(
        "--center-crop/--no-center-crop",
        help="Primus: --center-crop = --resize-mode crop, --no-center-crop = stretch.",
        rich_help_panel=PRIMUS, show_default=False)],
    "variable_size": Annotated[bool | None, typer.Option(
        "--variable-size", help="Primus: = --resize-mode variable (long side to --max-size).",
        rich_help_panel=PRIMUS, show_default=False)],
    "train_split": Annotated[float | None, typer.Option(
        help="Primus: F = --split F,(1-F)/2,(1-F)/2.",
        rich_help_panel=PRIMUS, show_default=False)],
    "vae_latent_mode": Annotated[str | None, typer.Option(
        help="Primus: presampled = --latent-mode sample, resample = --latent-mode resample.",
        rich_help_panel=PRIMUS, show_default=False)],
    "compress": Annotated[bool | None, typer.Option(
        "--compress",
        help="Primus: refused (shards stay uncompressed: Energon reads them by byte offset).",
        rich_help_panel=PRIMUS, show_default=False)],
}


#: The panel of the old spellings a command still takes.
DEPRECATED = "Deprecated"
#: `--split NAME` on the commands whose `--split` named one split part, before `--split` meant
#: ratios only (as finalize, raw and encode take it): still taken, with a warning.
OldSplitOpt = Annotated[str | None, typer.Option(
    "--split", help="The old spelling of --split-part NAME (--split means train,val,test "
                    "ratios, as finalize, raw and encode take them).",
    rich_help_panel=DEPRECATED, show_default=False)]


def given(ctx: typer.Context, name: str) -> bool:
    """Whether the parameter `name` was given on the command line (or its environment
    variable), not defaulted."""
    source = ctx.get_parameter_source(name)
    return getattr(source, "name", None) in ("COMMANDLINE", "ENVIRONMENT")


def take_old_split(ctx: typer.Context, old: str | None, options: dict[str, Any]) -> None:
    """`--split NAME` (`OldSplitOpt`) as `--split-part NAME` in `options`, saying so in one
    warning line on stderr; both given is refused (ConfigError)."""
    from shardcook.errors import ConfigError

    if old is None:
        return
    if given(ctx, "split_part"):
        raise ConfigError("--split NAME is the old spelling of --split-part NAME; give "
                          "--split-part only.")
    typer.echo("warning: --split NAME is deprecated here; use --split-part NAME.", err=True)
    options["split_part"] = old


#: Finds the declaration of an option by name: its dataclass field and type.
Lookup = Callable[[str], tuple["dataclasses.Field[Any]", Any]]


def declared_in(cls: type) -> Lookup:
    """The `Lookup` of the fields of the dataclass `cls` (the dataset commands' options)."""
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    return lambda name: (fields[name], hints[name])


def config_option(name: str, command: str, lookup: Lookup = option_field) -> tuple[Any, Any]:
    """(typer annotation, default) of the field `name` (a config field by default:
    `image_size`, or dotted: `chatml.max_pixels`) as `command`'s option, from the field's
    `CliOption` metadata. A list of floats (`--split`) is one comma-separated string on the
    command line."""
    found, hint = lookup(name)
    meta: CliOption = found.metadata[CLI]
    default: Any = found.default_factory() if callable(found.default_factory) else found.default
    if hint == list[float]:
        hint, default = str, ",".join(f"{v:g}" for v in default)
    info = typer.Option(*meta.flags, help=meta.help_in(command), rich_help_panel=meta.panel)
    return Annotated[hint, info], default



Command = TypeVar("Command", bound=Callable[..., None])


def with_config_options(names: Sequence[str], after: Sequence[str] = (),
                        lookup: Lookup = option_field) -> Callable[[Command], Command]:
    """A command whose options are its own parameters (ctx, --config, ...), then the fields
    `names` in that order (config fields, or those `lookup` finds; see `config_option`; the
    function takes them as `**options`), then the Primus aliases `after`: typer reads the
    signature this sets."""

    def build(command: Command) -> Command:
        own = [p for p in inspect.signature(command, eval_str=True).parameters.values()
               if p.kind is not p.VAR_KEYWORD]
        added = [(name.rpartition(".")[2], *config_option(name, command.__name__, lookup))
                 for name in names]
        added += [(name, PRIMUS_ALIASES[name], None) for name in after]
        params = [p for p in own if not _deprecated(p)] + [
            inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, annotation=annotation,
                              default=default) for name, annotation, default in added]
        # the old spellings last, so --help lists them after every option in use
        params += [p.replace(kind=inspect.Parameter.KEYWORD_ONLY) for p in own if _deprecated(p)]
        command.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]
        command.__annotations__ = {p.name: p.annotation for p in params}
        return command

    return build


def _deprecated(parameter: inspect.Parameter) -> bool:
    """Whether a command's own parameter is an old spelling (in the `DEPRECATED` panel)."""
    return any(getattr(info, "rich_help_panel", None) == DEPRECATED
               for info in typing.get_args(parameter.annotation)[1:])


def config_names(names: Sequence[str]) -> dict[str, str]:
    """The parameters of `with_config_options(names)` whose config name is dotted
    (`max_pixels` -> `chatml.max_pixels`), for `resolve_config`'s `renamed`."""
    return {name.rpartition(".")[2]: name for name in names if "." in name}


#: Parameters of the pipeline commands that are not config options.
_NOT_CONFIG = ("config", "print_config")


def resolve_config(
    ctx: typer.Context,
    config: Path | None,
    *,
    renamed: dict[str, str] | None = None,
    extra: dict[str, tuple[object, bool]] | None = None,
    encode: bool = False,
) -> RunConfig:
    """The run config from the command line (explicit options win), the --config file and the
    defaults; Primus's flags become the options they stand for. `renamed` maps a parameter to
    its config name (`input` -> `input_path`, `max_pixels` -> `chatml.max_pixels`); `extra`
    adds options the command implies, as (value, given explicitly); `encode` adds encode's
    checks and defaults (`config.resolve`)."""
    from shardcook.config import PRIMUS_FLAGS, resolve

    given = {
        n for n in ctx.params
        if getattr(ctx.get_parameter_source(n), "name", None) in ("COMMANDLINE", "ENVIRONMENT")
    }
    names = [n for n in ctx.params if n not in _NOT_CONFIG and n not in PRIMUS_FLAGS]
    primus = {n: ctx.params[n] for n in PRIMUS_FLAGS if n in given and ctx.params[n] is not None}
    rename = renamed or {}
    values = {rename.get(n, n): ctx.params[n] for n in names}
    explicit = {rename.get(n, n) for n in given & set(names)}
    for name, (value, is_given) in (extra or {}).items():
        values[name] = value
        if is_given:
            explicit.add(name)
    return resolve(values, explicit, config, primus, encode=encode)
