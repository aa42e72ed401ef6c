"""One source of truth for every option: typed dataclasses → CLI flags and YAML keys.

Each component declares its options as a dataclass whose fields carry a help text (see :func:`option`).
From those dataclasses this module generates the click options of a program, reads ``--config`` YAML
files with the same key names, and merges the sources in one fixed order::

    dataclass defaults  <  --arch preset  <  --config file.yaml  <  explicit CLI flags

A flag's name is its field's name with dashes (``max_tokens`` → ``--max-tokens``); a YAML key may use
either spelling, flat (``max_tokens: 4096``) or nested under its group (``task: {max_tokens: 4096}``),
so a dumped configuration loads back unchanged.
"""
from __future__ import annotations

import dataclasses
import difflib
import math
import types
import typing
from dataclasses import MISSING, dataclass, fields
from typing import Any, Callable, Iterable, Optional, Sequence

import click
import yaml
from click.core import ParameterSource

from nmt_toolkit.errors import NmtError, UsageError


def option(
    default: Any = MISSING,
    help: str = "",
    *,
    choices: Optional[Sequence[str]] = None,
    metavar: Optional[str] = None,
    flag: Optional[str] = None,
    short: Optional[str] = None,
    positional: bool = False,
    multiple: bool = False,
    default_factory: Any = MISSING,
    cli: bool = True,
    low: Optional[float] = None,
    high: Optional[float] = None,
    low_open: bool = False,
    high_open: bool = False,
    also: Sequence[float] = (),
    allow_inf: bool = False,
    output: Optional[str] = None,
):
    """A dataclass field that is also a CLI flag and a YAML key.

    ``help`` is required in spirit: ``--help`` must explain every option. ``positional`` makes the field a
    positional argument (the data folder, as in fairseq); ``multiple`` a repeatable flag (``--ref a --ref b``);
    ``cli=False`` keeps a field out of the command line (YAML only), for values derived by the program;
    ``short`` adds a one-letter spelling of the flag (``-o``) for an option typed on every run.

    A number's valid range is declared here too, so the command line, YAML files and ``--help`` agree on
    it: ``low``/``high`` bound it (inclusive unless ``low_open``/``high_open``), ``also`` lists sentinel
    values outside the bounds that keep a documented meaning (``-1``: no limit). A float is always refused
    when it is nan or infinite, unless ``allow_inf`` accepts ``inf`` (for a "no limit" value).

    ``output`` marks an option that names what the program writes: ``"file"``, ``"folder"``, or ``"path"``
    (either, by another option). Such a path is claimed through ``nmt_toolkit/outputs.py`` before any work,
    and the reliability tests find every one of them by this mark.
    """
    bounds = Range(low, high, low_open, high_open, tuple(also), allow_inf)
    meta = {"help": help, "choices": choices, "metavar": metavar, "flag": flag, "short": short,
            "positional": positional, "multiple": multiple, "cli": cli, "range": bounds, "output": output}
    if default_factory is not MISSING:
        return dataclasses.field(default_factory=default_factory, metadata=meta)
    if isinstance(default, (list, dict, set)):
        value = default
        return dataclasses.field(default_factory=lambda: type(value)(value), metadata=meta)
    return dataclasses.field(default=default, metadata=meta)


# --------------------------------------------------------------------------- ranges


def _number_text(value: float) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


@dataclass(frozen=True)
class Range:
    """The valid values of a numeric option (see :func:`option`)."""

    low: Optional[float] = None
    high: Optional[float] = None
    low_open: bool = False
    high_open: bool = False
    also: tuple = ()
    allow_inf: bool = False

    @property
    def bounded(self) -> bool:
        return self.low is not None or self.high is not None

    def contains(self, value: float) -> bool:
        if value in self.also:
            return True
        if isinstance(value, float) and not math.isfinite(value):
            return self.allow_inf and value == math.inf and self.high is None
        if self.low is not None and (value <= self.low if self.low_open else value < self.low):
            return False
        if self.high is not None and (value >= self.high if self.high_open else value > self.high):
            return False
        return True

    def interval(self) -> str:
        """The range in a few symbols for ``--help``: ``≥ 0``, ``(0, 1]``, ``≥ 1 or -1``."""
        low, high = self.low, self.high
        if low is not None and high is not None:
            left, right = "(" if self.low_open else "[", ")" if self.high_open else "]"
            text = f"{left}{_number_text(low)}, {_number_text(high)}{right}"
        elif low is not None:
            text = f"{'>' if self.low_open else '≥'} {_number_text(low)}"
        elif high is not None:
            text = f"{'<' if self.high_open else '≤'} {_number_text(high)}"
        else:
            text = "any"
        extra = [_number_text(v) for v in self.also] + (["inf"] if self.allow_inf else [])
        return text + (" or " + " or ".join(extra) if extra else "")

    def describe(self, tp: Any) -> str:
        """What the error message asks for: ``a finite number ≥ 0``, ``an integer in [1, 8]``."""
        noun = "an integer" if tp is int else ("a number" if self.allow_inf else "a finite number")
        if not self.bounded:
            return noun + (" or " + " or ".join(_number_text(v) for v in self.also) if self.also else "")
        text = self.interval()
        return f"{noun} in {text}" if text.startswith(("(", "[")) else f"{noun} {text}"


def _field_range(f: dataclasses.Field) -> Range:
    return f.metadata.get("range") or Range()


def shown_value(value: Any, limit: int = 40) -> str:
    """A value as an error message quotes it: at most ``limit`` characters (a request may send megabytes)."""
    text = str(value)
    return text if len(text) <= limit else text[:limit] + f"… ({len(text)} characters)"


def check_choice(f: dataclasses.Field, value: Any, what: str, error: type = UsageError) -> None:
    """Refuse a value that is not one of ``f``'s declared choices (each item of a list), naming ``what``: the
    one check of a choice, whether it came from a flag, YAML, a dict or code."""
    choices = f.metadata.get("choices")
    if not choices or value is None:
        return
    for v in (value if isinstance(value, (list, tuple)) else [value]):
        if v not in choices:
            raise error(f"{what} {shown_value(v)}: must be one of {', '.join(map(str, choices))}")


def check_range(f: dataclasses.Field, tp: Any, value: Any, what: str, error: type = UsageError) -> None:
    """Refuse a number outside ``f``'s declared range (a float's nan/inf always) or a value outside its
    declared choices, naming ``what``."""
    check_choice(f, value, what, error)
    tp, _ = _unwrap_optional(tp)
    item = _sequence_item_type(tp)
    number_type = item if item is not None else tp
    if number_type not in (int, float) or value is None:
        return
    bounds = _field_range(f)
    for v in (value if item is not None else [value]):
        if isinstance(v, (int, float)) and not isinstance(v, bool) and not bounds.contains(v):
            raise error(f"{what} {_number_text(v)}: must be {bounds.describe(number_type)}")


def check_ranges(cfg: Any, error: type = UsageError) -> None:
    """Every numeric field of the dataclass instance ``cfg`` in its declared range (and every field with
    choices among them), named by its flag: for a config built in code (a ``validate()`` calls it), which
    the command line's checks never saw."""
    hints = _resolved_hints(type(cfg))
    for f in fields(cfg):
        check_range(f, hints[f.name], getattr(cfg, f.name), flag_name(f), error)


# --------------------------------------------------------------------------- types


def _resolved_hints(cls: type) -> dict[str, Any]:
    """Field types with string annotations resolved, each in the module of the class that declared it
    (a plugin's config may subclass ours and import fewer names)."""
    return typing.get_type_hints(cls)


def _unwrap_optional(tp: Any) -> tuple[Any, bool]:
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if len(args) == 1:
            return args[0], True
    return tp, False


def _sequence_item_type(tp: Any) -> Optional[Any]:
    """The element type of ``list[T]`` / ``tuple[T, ...]``, else None."""
    origin = typing.get_origin(tp)
    if origin in (list, tuple, Sequence):
        args = [a for a in typing.get_args(tp) if a is not Ellipsis]
        return args[0] if args else str
    return None


def _parse_scalar(value: Any, tp: Any, what: str) -> Any:
    if tp is Any:
        return value
    if tp is bool:
        if isinstance(value, bool):
            return value
        text = str(value).strip().lower()
        if text in ("1", "true", "yes", "on"):
            return True
        if text in ("0", "false", "no", "off"):
            return False
        raise UsageError(f"{what}: expected true or false, got {value!r}")
    if tp in (int, float):
        if isinstance(value, bool):
            raise UsageError(f"{what}: expected a number, got {value!r}")
        try:
            if tp is int:
                as_float = float(value)
                if not as_float.is_integer():
                    raise ValueError
                return int(as_float)
            return float(value)
        except (TypeError, ValueError):
            raise UsageError(f"{what}: expected {'an integer' if tp is int else 'a number'}, got {value!r}") from None
    if tp is str:
        return str(value)
    return value


def coerce(value: Any, tp: Any, what: str) -> Any:
    """Convert a CLI string or YAML value to the field's declared type, with a message naming ``what``."""
    tp, optional = _unwrap_optional(tp)
    if value is None or (optional and isinstance(value, str) and value.strip().lower() in ("none", "null")):
        if optional or tp is Any:
            return None
        raise UsageError(f"{what}: a value is required")
    item = _sequence_item_type(tp)
    if item is not None:
        if isinstance(value, str):
            text = value.strip().strip("()[]")
            parts = [p.strip() for p in text.split(",") if p.strip()] if item is not str else (
                [p.strip() for p in text.split(",")] if "," in text else ([text] if text else []))
        elif isinstance(value, (list, tuple)):
            parts = list(value)
        else:
            parts = [value]
        converted = [_parse_scalar(p, item, what) for p in parts]
        return tuple(converted) if typing.get_origin(tp) is tuple else converted
    return _parse_scalar(value, tp, what)


# --------------------------------------------------------------------------- field lookup


def flag_name(f: dataclasses.Field) -> str:
    return f.metadata.get("flag") or "--" + f.name.replace("_", "-")


def cli_fields(cls: type) -> list[dataclasses.Field]:
    return [f for f in fields(cls) if f.metadata.get("cli", True)]


def _default_of(f: dataclasses.Field) -> Any:
    if f.default is not MISSING:
        return f.default
    if f.default_factory is not MISSING:  # type: ignore[misc]
        return f.default_factory()  # type: ignore[misc]
    return None


def _default_text(value: Any) -> str:
    if isinstance(value, (list, tuple)):
        return ",".join(str(v) for v in value)
    return str(value)


@dataclass
class Group:
    """A named slot of a program's configuration, filled by one dataclass (``model`` ← TransformerConfig)."""

    name: str
    cls: type
    title: str = ""


def _check_unique(groups: Sequence[Group]) -> dict[str, tuple[Group, dataclasses.Field]]:
    """Map every field name to its group; two components declaring the same option is a bug."""
    owners: dict[str, tuple[Group, dataclasses.Field]] = {}
    for group in groups:
        for f in fields(group.cls):
            if f.name in owners:
                other = owners[f.name][0]
                raise UsageError(
                    f"option --{f.name.replace('_', '-')} is declared twice: by {other.cls.__qualname__} "
                    f"({other.name}) and by {group.cls.__qualname__} ({group.name})"
                )
            owners[f.name] = (group, f)
    return owners


# --------------------------------------------------------------------------- click


class _HelpSectionsCommand(click.Command):
    """A click command whose ``--help`` lists options under one heading per component."""

    def __init__(self, *args, sections: Sequence[tuple[str, list[str]]] = (), **kwargs):
        super().__init__(*args, **kwargs)
        self.sections = sections

    def format_options(self, ctx, formatter):
        by_name = {p.name: p for p in self.get_params(ctx)}
        shown: set[str] = set()
        for title, names in self.sections:
            rows = []
            for name in names:
                param = by_name.get(name)
                if param is None or isinstance(param, click.Argument):
                    continue
                record = param.get_help_record(ctx)
                if record:
                    rows.append(record)
                    shown.add(name)
            if rows:
                with formatter.section(title):
                    formatter.write_dl(rows)
        # positional arguments are shown in the usage line; click >= 8.3 would also list them here
        rest = [p.get_help_record(ctx) for p in self.get_params(ctx)
                if p.name not in shown and not isinstance(p, click.Argument)]
        rest = [r for r in rest if r]
        if rest:
            with formatter.section("Other options"):
                formatter.write_dl(rest)


class _ListedChoice(click.Choice):
    """A choice option's values for the shell's completion; the value itself is checked by
    :func:`check_choice` with every other source's values (YAML, dicts, code), so a flag's error is theirs."""

    def convert(self, value: Any, param: Optional[click.Parameter], ctx: Optional[click.Context]) -> Any:
        return value


def click_params(cls: type) -> list[click.Parameter]:
    """The click options (and positional arguments) of one config dataclass."""
    hints = _resolved_hints(cls)
    params: list[click.Parameter] = []
    for f in cli_fields(cls):
        tp, _ = _unwrap_optional(hints[f.name])
        meta = f.metadata
        default = _default_of(f)
        help_text = meta.get("help", "")
        if meta.get("positional"):
            params.append(click.Argument([f.name], required=default is None and f.default is MISSING,
                                         default=None, metavar=(meta.get("metavar") or f.name.upper())))
            continue
        choice = _ListedChoice(list(meta["choices"])) if meta.get("choices") else None
        if tp is bool and not meta.get("multiple"):
            name = flag_name(f)
            if default:
                decl = f"{name}/--no-{name[2:]}"
                params.append(click.Option([decl, f.name], default=True, help=f"{help_text} [default: on]"))
            else:
                params.append(click.Option([name, f.name], is_flag=True, default=False, help=help_text))
            continue
        notes = [] if default is None or default == [] else [f"default: {_default_text(default)}"]
        item = _sequence_item_type(tp)
        if (item or tp) in (int, float) and (_field_range(f).bounded or _field_range(f).also):
            notes.append(f"range: {_field_range(f).interval()}")
        show = f" [{'; '.join(notes)}]" if notes else ""
        params.append(
            click.Option(
                [flag_name(f), *([meta["short"]] if meta.get("short") else []), f.name],
                type=choice or click.STRING,
                default=None,
                multiple=bool(meta.get("multiple")),
                metavar=meta.get("metavar") or ("CHOICE" if choice else tp.__name__.upper() if isinstance(tp, type) else "VALUE"),
                help=help_text + show,
            )
        )
    return params


# --------------------------------------------------------------------------- merging


def _flatten_yaml(data: Any, path: str, group_names: Iterable[str]) -> dict[str, Any]:
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise UsageError(f"--config {path}: expected a mapping of option names to values")
    flat: dict[str, Any] = {}
    groups = set(group_names)
    for key, value in data.items():
        key = str(key).replace("-", "_")
        if key in groups and isinstance(value, dict):
            for k, v in value.items():
                flat[str(k).replace("-", "_")] = v
        else:
            flat[key] = value
    return flat


def load_yaml(path: str) -> Any:
    try:
        with open(path, encoding="utf-8") as handle:
            return yaml.safe_load(handle)
    except FileNotFoundError:
        raise UsageError(f"--config {path}: no such file") from None
    except UnicodeDecodeError as exc:
        raise UsageError(f"--config {path}: not UTF-8 text (byte {exc.start}); save it as UTF-8") from None
    except OSError as exc:
        raise UsageError(f"--config {path}: cannot read ({exc.strerror or exc})") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" line {mark.line + 1}" if mark else ""
        raise UsageError(f"--config {path}:{where}: not valid YAML ({getattr(exc, 'problem', exc)})") from None


def read_yaml_options(path: str, group_names: Iterable[str] = ()) -> dict[str, Any]:
    """The flat ``{field_name: value}`` mapping of a ``--config`` file (nested groups flattened)."""
    return _flatten_yaml(load_yaml(path), path, group_names)


def closest(name: str, choices: Iterable[str]) -> str:
    close = difflib.get_close_matches(name, list(choices), n=1, cutoff=0.6)
    return f"; did you mean {close[0]}?" if close else ""


def resolve(
    groups: Sequence[Group],
    cli_values: dict[str, Any],
    explicit: set[str],
    yaml_values: Optional[dict[str, Any]] = None,
    yaml_path: str = "",
    preset: Optional[Callable[[dict[str, Any]], None]] = None,
    ignore_yaml_keys: Iterable[str] = (),
) -> dict[str, Any]:
    """Build the config instances in merge order; returns ``{group name: dataclass instance}``.

    ``explicit`` names the fields given on the command line; only those override earlier sources.
    """
    owners = _check_unique(groups)
    configs = {g.name: g.cls() for g in groups}
    if preset is not None:
        preset(configs)
    skip = set(ignore_yaml_keys)
    source: dict[str, str] = {}  # field name -> how an error names where its value came from
    for key, value in (yaml_values or {}).items():
        if key in skip:
            continue
        if key not in owners:
            raise UsageError(f"--config {yaml_path}: unknown key {key!r}{closest(key, owners)}")
        group, f = owners[key]
        hints = _resolved_hints(group.cls)
        source[key] = f"--config {yaml_path}: {key}"
        setattr(configs[group.name], key, coerce(value, hints[key], source[key]))
    for key in explicit:
        if key not in owners:
            continue
        group, f = owners[key]
        hints = _resolved_hints(group.cls)
        value = cli_values[key]
        if f.metadata.get("multiple") and isinstance(value, tuple):
            value = list(value)
        source[key] = flag_name(f)
        setattr(configs[group.name], key, coerce(value, hints[key], source[key]))
    _check_ranges(groups, configs, source)
    for cfg in configs.values():
        check = getattr(cfg, "validate", None)
        if callable(check):
            check()
    return configs


def _check_ranges(groups: Sequence[Group], configs: dict[str, Any], source: dict[str, str]) -> None:
    """Every numeric field in its declared range, whichever source set it (a preset's value is named by
    its flag), before any component sees the values."""
    for group in groups:
        hints = _resolved_hints(group.cls)
        for f in fields(group.cls):
            check_range(f, hints[f.name], getattr(configs[group.name], f.name), source.get(f.name, flag_name(f)))


def explicit_params(ctx: click.Context) -> set[str]:
    """Names of the parameters the user actually typed (or set through the environment)."""
    given = set()
    for name in ctx.params:
        source = ctx.get_parameter_source(name)
        if source in (ParameterSource.COMMANDLINE, ParameterSource.ENVIRONMENT):
            given.add(name)
    return given


def to_dict(configs: dict[str, Any], extra: Optional[dict[str, Any]] = None) -> dict[str, Any]:
    """Plain nested dict of the effective configuration (for checkpoints and YAML dumps)."""
    out: dict[str, Any] = dict(extra or {})
    for name, cfg in configs.items():
        values = dataclasses.asdict(cfg)
        out[name] = {k: list(v) if isinstance(v, tuple) else v for k, v in values.items()}
    return out


def dump_yaml(configs: dict[str, Any], extra: Optional[dict[str, Any]] = None) -> str:
    return yaml.safe_dump(to_dict(configs, extra), sort_keys=False, allow_unicode=True)


def from_dict(cls: type, values: dict[str, Any], what: str = "config") -> Any:
    """Rebuild a dataclass from a plain dict (a checkpoint's stored config); unknown keys are errors."""
    hints = _resolved_hints(cls)
    names = {f.name for f in fields(cls)}
    kwargs = {}
    for key, value in (values or {}).items():
        if key not in names:
            raise NmtError(f"{what}: unknown key {key!r}{closest(key, names)}")
        kwargs[key] = coerce(value, hints[key], f"{what}: {key}")
    by_name = {f.name: f for f in fields(cls)}
    for key, value in kwargs.items():
        check_range(by_name[key], hints[key], value, f"{what}: {key}", NmtError)
    return cls(**kwargs)


# --------------------------------------------------------------------------- commands


@dataclass
class CommonConfig:
    """Options every program understands."""

    config: Optional[str] = option(None, "YAML file of options (keys are option names); explicit flags override it",
                                   metavar="FILE")
    dump_config: bool = option(False, "print the effective configuration as YAML and exit")
    user_dir: Optional[str] = option(None, "import this plugin package (a folder or .py file) before anything else",
                                     metavar="PATH")
    debug: bool = option(False, "show Python tracebacks for errors")
    seed: int = option(1, "random seed: fixes initialisation, dropout and data order", low=0, high=2**32 - 1)


def build_command(
    prog: str,
    groups: Sequence[Group],
    run: Callable[[dict[str, Any]], Optional[int]],
    help: str,
    preset: Optional[Callable[[dict[str, Any]], None]] = None,
    extra_dump: Optional[Callable[[dict[str, Any]], dict[str, Any]]] = None,
) -> click.Command:
    """A click command whose options come from ``groups``; ``run`` receives the merged configs.

    The first group should be ``common`` (:class:`CommonConfig`) so ``--config`` and ``--dump-config`` work.
    """
    _check_unique(groups)
    params: list[click.Parameter] = []
    sections = []
    for group in groups:
        group_params = click_params(group.cls)
        params.extend(group_params)
        title = group.title or f"{group.name.replace('_', ' ')} options"
        sections.append((title, [p.name for p in group_params]))
    names = [g.name for g in groups]

    def callback(**values):
        ctx = click.get_current_context()
        yaml_path = values.get("config")
        yaml_values = read_yaml_options(yaml_path, names) if yaml_path else None
        configs = resolve(groups, values, explicit_params(ctx), yaml_values, yaml_path or "", preset)
        if values.get("dump_config"):
            extra = extra_dump(configs) if extra_dump else None
            click.echo(dump_yaml({k: v for k, v in configs.items() if k != "common"}, extra), nl=False)
            return 0
        return run(configs)

    command = _HelpSectionsCommand(
        prog,
        params=params,
        callback=callback,
        help=help,
        sections=sections,
        context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 110},
    )
    command.groups = list(groups)  # what the program's options are made of, for tools and tests that walk them
    return command


def peek_options(argv: Sequence[str], names: Sequence[str]) -> dict[str, Optional[str]]:
    """Values of selector options (``--arch``, ``--criterion``, ``--user-dir``…) before full parsing.

    The selected components decide which options exist, so they are read first: from the command line,
    else from the ``--config`` YAML file. Returns ``{field_name: value or None}``.
    """
    found: dict[str, Optional[str]] = {n: None for n in names}
    flags = {"--" + n.replace("_", "-"): n for n in list(names) + ["config"]}
    cli: dict[str, str] = {}
    args = list(argv)
    for i, arg in enumerate(args):
        if arg == "--":
            break
        key, eq, value = arg.partition("=")
        if key in flags:
            if eq:
                cli[flags[key]] = value
            elif i + 1 < len(args):
                cli[flags[key]] = args[i + 1]
    if cli.get("config"):
        yaml_values = _flatten_yaml(load_yaml(cli["config"]), cli["config"],
                                    ("common", "task", "model", "criterion", "optimizer", "lr_scheduler",
                                     "optimization", "checkpoint", "distributed", "logging", "generation"))
        for n in names:
            if yaml_values.get(n) is not None:
                found[n] = str(yaml_values[n])
    for n in names:
        if cli.get(n) is not None:
            found[n] = cli[n]
    return found
