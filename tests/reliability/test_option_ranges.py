"""Every numeric option refuses a value outside its range: the matrix is generated from the option dataclasses.

The programs are walked through the same command builder they run (every registered task, model,
criterion, optimizer and LR scheduler selected in turn for nmt-train), so an option added to any of their
dataclasses joins the matrix by itself. For each float: nan, inf, -inf and a value just outside its declared
range; for each int: a value just outside it. Each case must end with exit status 2, one ``prog: error:``
line naming the flag, no traceback, and no file created, removed or changed.
"""
from __future__ import annotations

import dataclasses
import math
import os
from unittest import mock

import pytest

from nmt_toolkit import config, registry
from nmt_toolkit.generation.translator import Translator
from nmt_toolkit.models.transformer import TransformerConfig
from tests.reliability.harness import assert_refused, assert_unchanged, run_in_process, snapshot
from tests.train_helpers import TINY, make_bin

#: numeric fields that are deliberately unbounded (only nan/inf are refused for floats), and why: none at
#: present (--unkpen, --max-len-b and --lenpen have ranges that keep the search's numbers finite)
UNBOUNDED: set[tuple[str, str]] = set()

SELECTORS = {"--task": registry.TASKS, "--criterion": registry.CRITERIA, "--optimizer": registry.OPTIMIZERS,
             "--lr-scheduler": registry.LR_SCHEDULERS}


def built_groups(prog: str, args: list[str]) -> list[config.Group]:
    """The option groups ``prog`` builds for ``args`` (its command is built as for a real run, not run)."""
    seen = []

    def record(self, *a, **k):
        seen.append(self.groups)
        return 0

    with mock.patch.object(config._HelpSectionsCommand, "main", record):
        run_in_process(prog, args)
    assert seen, f"{prog} built no command"
    return seen[-1]


def selections() -> list[list[str]]:
    """nmt-train's selector flags that, together, bring every registered component's options in."""
    registry.import_builtin_components()
    picks = [[]]
    for flag, reg in SELECTORS.items():
        picks += [[flag, name] for name in reg.names()]
    models = {}
    for name in registry.ARCHITECTURES.names():
        models.setdefault(registry.ARCHITECTURES.get(name).parent, name)
    picks += [["--arch", name] for name in models.values()]
    return picks


def program_fields() -> list[tuple[str, tuple[str, ...], type, dataclasses.Field, type]]:
    """(program, selector args, config class, field, number type) of every numeric CLI option, once each."""
    found, seen = [], set()
    programs = [("nmt-train", tuple(sel)) for sel in selections()]
    programs += [(p, ()) for p in ("nmt-generate", "nmt-interactive", "nmt-score", "nmt-preprocess",
                                   "nmt-average-checkpoints", "nmt-export", "nmt-convert")]
    for prog, sel in programs:
        for group in built_groups(prog, list(sel)):
            hints = config._resolved_hints(group.cls)
            for f in config.cli_fields(group.cls):
                tp, _ = config._unwrap_optional(hints[f.name])
                if tp in (int, float) and not f.metadata.get("positional") and (prog, group.cls, f.name) not in seen:
                    seen.add((prog, group.cls, f.name))
                    found.append((prog, sel, group.cls, f, tp))
    return found


def outside(f: dataclasses.Field, tp: type) -> list[str]:
    """The values just outside ``f``'s range (and nan/±inf for a float)."""
    r = config._field_range(f)
    values: list[float] = []
    if r.low is not None:
        v = r.low if r.low_open else (r.low - 1 if tp is int else r.low - 1e-3)
        while v in r.also:
            v -= 1
        values.append(v)
    if r.high is not None:
        values.append(r.high if r.high_open else (r.high + 1 if tp is int else r.high + 1e-3))
    if tp is float:
        values += [math.nan, -math.inf] + ([] if r.allow_inf else [math.inf])
    return [repr(int(v)) if tp is int else repr(float(v)) for v in values]


FIELDS = program_fields()
CASES = [pytest.param(prog, sel, f, value, id=f"{prog}{''.join('-' + s for s in sel[1:])}-{f.name}={value}")
         for prog, sel, cls, f, tp in FIELDS for value in outside(f, tp)]


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """A tiny data-bin, a one-update checkpoint, raw text: what the base commands need."""
    root = tmp_path_factory.mktemp("ranges")
    data = make_bin(root)
    save = root / "ckpt"
    assert run_in_process("nmt-train", [data, *TINY, "--save-dir", save, "--max-update", "1"]).status == 0
    cwd = os.getcwd()
    os.chdir(root)  # a relative path a program wrongly writes to lands where the snapshot sees it
    yield root, data, save / "checkpoint_last.pt"
    os.chdir(cwd)


def base_args(prog: str, root, data, ck) -> tuple[list[str], str]:
    """A command of ``prog`` that runs (stdin text second): the bad value is appended to it."""
    raw = root / "raw"
    cut = TINY.index("--warmup-updates")  # not every schedule has the option
    tiny = TINY[:cut] + TINY[cut + 2:]
    return {
        "nmt-train": ([data, *tiny, "--save-dir", root / "new-ckpt", "--max-update", "1"], ""),
        "nmt-generate": ([data, "--path", ck, "--gen-subset", "valid", "--beam", "2", "--max-len-b", "5"], ""),
        "nmt-interactive": ([data, "--path", ck, "--beam", "2", "--max-len-b", "5"], "w1 w2 w3\n"),
        "nmt-score": (["--sys", raw / "valid.yy", "--ref", raw / "valid.yy"], ""),
        "nmt-preprocess": (["--source-lang", "xx", "--target-lang", "yy", "--trainpref", raw / "train",
                            "--destdir", root / "new-bin", "--workers", "1", "--no-progress-bar"], ""),
        "nmt-average-checkpoints": (["--inputs", ck, "--output", root / "averaged.pt"], ""),
        "nmt-export": ([data, "--path", ck, "--format", "fairseq", "--output-dir", root / "exported"], ""),
        "nmt-convert": (["--path", ck, "--output", root / "converted.pt"], ""),
    }[prog]


@pytest.mark.parametrize("prog, selection, f, value", CASES)
def test_a_value_outside_the_range_is_refused(world, prog, selection, f, value):
    root, data, ck = world
    args, stdin = base_args(prog, root, data, ck)
    flag = config.flag_name(f)
    before = snapshot(root)
    result = run_in_process(prog, [*args, *selection, flag, value], stdin=stdin)
    line = assert_refused(result, f"{flag} ", status=2)
    assert "must be" in line, line
    assert not result.stdout
    assert_unchanged(before, root)


@pytest.mark.parametrize("prog", ["nmt-generate", "nmt-interactive", "nmt-score"])
def test_the_base_commands_run(world, prog):
    """The refusals above come from the bad value, not from a base command that fails anyway."""
    root, data, ck = world
    args, stdin = base_args(prog, root, data, ck)
    result = run_in_process(prog, args, stdin=stdin)
    assert result.status == 0, result.stderr[-2000:]
    assert result.stdout


def test_the_matrix_covers_every_program_and_component():
    names = {(cls.__name__, f.name) for _, _, cls, f, _ in FIELDS}
    for expected in [("GenerationConfig", "lenpen"), ("CosineConfig", "min_lr"), ("SGDConfig", "momentum"),
                     ("NoamConfig", "warmup_updates"), ("ScoreConfig", "width"), ("InteractiveIOConfig", "buffer_size"),
                     ("PreprocessConfig", "workers"), ("AverageConfig", "num_epoch_checkpoints"),
                     ("OptimizationConfig", "clip_norm"), ("CommonConfig", "seed"), ("TransformerConfig", "dropout")]:
        assert expected in names, expected
    assert len(CASES) > 200


def test_every_numeric_option_declares_a_range():
    """A new numeric option must say what values it accepts (or be listed in UNBOUNDED with a reason)."""
    bare = sorted({(cls.__name__, f.name) for _, _, cls, f, _ in FIELDS
                   if not (config._field_range(f).bounded or config._field_range(f).also)} - UNBOUNDED)
    assert not bare, f"numeric options without a declared range: {bare}"


@pytest.mark.parametrize("prog, key, text", [
    ("nmt-generate", "lenpen", ".nan"), ("nmt-generate", "generation", "{min_len: -1}"),
    ("nmt-train", "clip_norm", ".inf"), ("nmt-train", "optimization", "{update_freq: 0}"),
])
def test_a_config_file_value_outside_the_range_names_the_file_and_key(world, prog, key, text):
    root, data, ck = world
    args, stdin = base_args(prog, root, data, ck)
    path = root / "bad.yaml"
    path.write_text(f"{key}: {text}\n")
    before = snapshot(root)
    result = run_in_process(prog, [*args, "--config", path], stdin=stdin)
    name = key if key not in ("generation", "optimization") else text[1:].split(":")[0]
    assert_refused(result, f"--config {path}: {name} ", "must be", status=2)
    assert_unchanged(before, root)


@pytest.mark.parametrize("prog, flag, key, choices", [
    ("nmt-generate", "--early-stop", "early_stop", "auto, bound, beam, never"),
    ("nmt-train", "--activation-fn", "activation_fn", "relu, gelu, silu"),
])
def test_an_unknown_choice_is_one_error_line_whether_flag_config_file_or_code(world, prog, flag, key, choices):
    """One check of a choice (config.check_choice) for every source, so each names the value and the choices in
    the same words; only where the value came from differs."""
    root, data, ck = world
    args, stdin = base_args(prog, root, data, ck)
    path = root / "choice.yaml"
    path.write_text(f"{key}: bogus\n")
    before = snapshot(root)
    by_flag = assert_refused(run_in_process(prog, [*args, flag, "bogus"], stdin=stdin), status=2)
    by_file = assert_refused(run_in_process(prog, [*args, "--config", path], stdin=stdin), status=2)
    assert by_flag == f"{prog}: error: {flag} bogus: must be one of {choices}"
    assert by_file == f"{prog}: error: --config {path}: {key} bogus: must be one of {choices}"
    assert_unchanged(before, root)
    if key == "early_stop":
        with pytest.raises(config.NmtError) as loaded:
            Translator.load(str(ck), data=str(data), early_stop="bogus")
        assert str(loaded.value) == f"Translator: early_stop bogus: must be one of {choices}"
    else:  # a model config built in code is checked by its validate(), as the flag is
        with pytest.raises(config.UsageError) as built:
            TransformerConfig(activation_fn="bogus").validate()
        assert str(built.value) == f"{flag} bogus: must be one of {choices}"


def test_help_shows_the_range():
    result = run_in_process("nmt-generate", ["--help"])
    text = " ".join(result.stdout.split())
    assert "range: ≥ 0]" in text and "range: (0, 1] or -1]" in text


def test_a_plugin_option_without_a_range_takes_any_finite_number_but_not_nan():
    @dataclasses.dataclass
    class PluginConfig:
        gamma: float = config.option(1.0, "a plugin's own number, declared without a range")

    groups = [config.Group("plugin", PluginConfig)]
    assert config.resolve(groups, {"gamma": "-5e3"}, {"gamma"})["plugin"].gamma == -5e3
    for bad in ("nan", "inf", "-inf"):
        with pytest.raises(config.UsageError, match=f"^--gamma {bad}: must be a finite number$"):
            config.resolve(groups, {"gamma": bad}, {"gamma"})


def test_a_checkpoint_config_outside_the_range_is_refused_naming_it():
    from nmt_toolkit.errors import NmtError
    from nmt_toolkit.models.transformer import TransformerConfig

    with pytest.raises(NmtError, match=r"^ck\.pt: model config: dropout 1\.5: must be a finite number in \[0, 1\)$"):
        config.from_dict(TransformerConfig, {"dropout": 1.5}, "ck.pt: model config")
    with pytest.raises(NmtError, match=r"^ck\.pt: model config: attention_heads 0: must be an integer in \[1, 1024\]$"):
        config.from_dict(TransformerConfig, {"attention_heads": 0}, "ck.pt: model config")


def test_a_field_may_accept_inf_as_no_limit():
    @dataclasses.dataclass
    class LimitConfig:
        budget: float = config.option(math.inf, "seconds to spend (inf: no limit)", low=0, low_open=True,
                                      allow_inf=True)

    groups = [config.Group("limit", LimitConfig)]
    assert config.resolve(groups, {"budget": "inf"}, {"budget"})["limit"].budget == math.inf
    for bad, message in (("-inf", "-inf"), ("nan", "nan"), ("0", "0")):
        with pytest.raises(config.UsageError, match=f"^--budget {message}: must be a number > 0 or inf$"):
            config.resolve(groups, {"budget": bad}, {"budget"})


@pytest.mark.parametrize("arch", sorted(registry.ARCHITECTURES.names()))
def test_every_architecture_preset_lies_in_the_ranges(arch):
    entry = registry.ARCHITECTURES.get(arch)
    cfg = registry.MODELS.get(entry.parent).config()
    entry.obj(cfg)
    config.check_ranges(cfg)
    cfg.validate()
