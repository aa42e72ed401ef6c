"""Registries (duplicates, unknown names), --user-dir plugins in --help, config merge order, YAML dump."""
import textwrap
from dataclasses import dataclass

import pytest

from nmt_toolkit import registry
from nmt_toolkit.cli.common import run_cli
from nmt_toolkit.config import CommonConfig, Group, build_command, option, peek_options
from nmt_toolkit.errors import UsageError


def test_duplicate_and_unknown_names():
    reg = registry.Registry("criterion", "--criterion")

    @reg.register("label_smoothed")
    def first():
        pass

    def second():
        pass

    with pytest.raises(UsageError, match=r"duplicate criterion name 'label_smoothed'.*first.*second"):
        reg.register("label_smoothed")(second)
    with pytest.raises(UsageError, match=r"unknown --criterion label_smothed; did you mean label_smoothed\?"):
        reg.get("label_smothed")


@dataclass
class ToyModelConfig:
    layers: int = option(6, "layers")
    dim: int = option(512, "width")
    dropout: float = option(0.1, "dropout")


def _toy_preset(configs):
    configs["model"].dim = 1024
    configs["model"].dropout = 0.3


def _program(captured):
    groups = [Group("common", CommonConfig), Group("model", ToyModelConfig)]

    def make(argv):
        return build_command("toy", groups, lambda c: captured.update(c) or 0, "toy program", preset=_toy_preset)

    return make


def test_merge_order_defaults_preset_yaml_cli(tmp_path):
    cfg = tmp_path / "c.yaml"
    cfg.write_text("model:\n  dropout: 0.2\nlayers: 4\n")
    got = {}
    assert run_cli("toy", _program(got), ["--config", str(cfg), "--layers", "6"]) == 0
    m = got["model"]
    # dim from the preset, dropout from YAML over the preset, layers from the CLI over YAML (even = default)
    assert (m.dim, m.dropout, m.layers) == (1024, 0.2, 6)


def test_unknown_yaml_key_and_flag_name_closest(tmp_path, capsys):
    cfg = tmp_path / "c.yaml"
    cfg.write_text("dropuot: 0.2\n")
    assert run_cli("toy", _program({}), ["--config", str(cfg)]) == 2
    assert "did you mean dropout?" in capsys.readouterr().err
    assert run_cli("toy", _program({}), ["--dropuot", "0.2"]) == 2
    assert "--dropout" in capsys.readouterr().err


def test_dump_config_round_trip(tmp_path, capsys):
    assert run_cli("toy", _program({}), ["--layers", "3", "--dump-config"]) == 0
    dumped = capsys.readouterr().out
    (tmp_path / "d.yaml").write_text(dumped)
    got = {}
    assert run_cli("toy", _program(got), ["--config", str(tmp_path / "d.yaml")]) == 0
    assert (got["model"].layers, got["model"].dim, got["model"].dropout) == (3, 1024, 0.3)


@dataclass
class Selector:
    task: str = option("translation", "the task")


def test_user_dir_plugin_component_and_option_in_help(tmp_path, capsys):
    plugin = tmp_path / "toy_plugin_task"
    plugin.mkdir()
    (plugin / "__init__.py").write_text(textwrap.dedent('''
        from dataclasses import dataclass
        from nmt_toolkit.config import option
        from nmt_toolkit.registry import register_task

        @dataclass
        class ReverseConfig:
            reverse_source: bool = option(False, "feed the source sentence backwards (plugin option)")

        @register_task("toy_reverse", config=ReverseConfig)
        class ReverseTask:
            pass
    '''))

    def make(argv):
        sel = peek_options(argv, ["user_dir", "task"])
        if sel["user_dir"]:
            registry.import_user_dir(sel["user_dir"])
        entry = registry.TASKS.get(sel["task"] or "translation_missing")
        groups = [Group("common", CommonConfig), Group("components", Selector), Group("task", entry.config)]
        return build_command("toy", groups, lambda c: 0,
                             f"tasks: {', '.join(registry.TASKS.names())}")

    try:
        assert run_cli("toy", make, ["--user-dir", str(plugin), "--task", "toy_reverse", "--help"]) == 0
        out = capsys.readouterr().out
        assert "--reverse-source" in out and "plugin option" in out and "toy_reverse" in out
        assert run_cli("toy", make, ["--user-dir", str(plugin), "--task", "toy_revers"]) == 2
        assert "did you mean toy_reverse?" in capsys.readouterr().err
    finally:
        registry.TASKS._entries.pop("toy_reverse", None)  # the throwaway plugin task leaves no trace


def test_translation_task_registered_with_config():
    registry.import_builtin_components()
    entry = registry.TASKS.get("translation")
    from nmt_toolkit.tasks.translation import TranslationConfig, TranslationTask

    assert entry.obj is TranslationTask and entry.config is TranslationConfig
    assert TranslationConfig().max_tokens == 4096 and TranslationConfig().required_batch_size_multiple == 8
