"""Every rule's one declaration (fl_async.hyperparameters): the presets' signatures, the run
config's tables, pyproject.toml's sections and the docs' tables are what it derives, and a
declaration out of shape is refused naming what is wrong."""

from __future__ import annotations

import inspect
from pathlib import Path

import benchmark_modules  # noqa: F401 (blocks, imported as the scripts do)
import blocks
import pytest

from fl_async import config, strategies
from fl_async.aggregators import fadas, gsgm, mifa, staleness, trend_smooth
from fl_async.aggregators.robust import COMBINES
from fl_async.app.config import parse_run_config
from fl_async.hyperparameters import DECLARATIONS, Declaration, Hyper, Values, registry
from fl_async.hyperparameters.declaration import INTEGER, NUMBER
from fl_async.hyperparameters.tables import table, toml_section, toml_value
from fl_async.strategies import PRESETS

ROOT = Path(__file__).resolve().parents[1]
DOCS = {"docs/running.md": ["run-config"], "docs/strategies.md": ["presets"]}


def keywords(cls: type) -> list[inspect.Parameter]:
    """The preset's keyword-only parameters, in order (``**kwargs`` goes to AsyncStrategy)."""
    parameters = inspect.signature(cls.__init__).parameters.values()
    return [p for p in parameters if p.kind is inspect.Parameter.KEYWORD_ONLY]


@pytest.mark.parametrize("name", list(DECLARATIONS))
def test_each_presets_signature_is_its_declaration(name):
    declaration = DECLARATIONS[name]
    cls = PRESETS[name]
    assert cls.__name__ == declaration.preset
    found = [(p.name, p.default, type(p.default)) for p in keywords(cls)]
    declared = [(h.name, h.default, type(h.default)) for h in declaration.hypers]
    assert found == declared  # names, order, values and types (2.0 stays a float)


def test_the_run_config_and_the_presets_are_the_declarations():
    assert list(PRESETS) == list(DECLARATIONS) == list(config.STRATEGIES)
    assert config.PRESET_TABLES == {n: d.table for n, d in DECLARATIONS.items()}
    assert config.DEFAULTS["mifa.lr-schedule"] == "constant"
    assert config.DEFAULTS["gsgm.cache-dir"] == config.DEFAULTS["asp.period"] == "default"
    assert config.check_value("fedbuff.lr", 3) == 3.0  # TOML's 3 for a float default


def test_pyproject_holds_each_presets_section():
    text = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    for declaration in DECLARATIONS.values():
        section = toml_section(declaration)
        assert section + "\n" in text, f"pyproject.toml lacks, exactly:\n{section}"


@pytest.mark.parametrize("path", list(DOCS))
def test_the_docs_tables_are_the_declarations(path):
    text = (ROOT / path).read_text(encoding="utf-8")
    _, found, changed = blocks.generate(text, name=path)
    assert [b.source for b in found if b.kind == blocks.DECLARED] == DOCS[path]
    assert not changed, f"run: python benchmarks/blocks.py {path}"


def test_a_declared_block_is_rewritten_and_an_unknown_table_named(tmp_path):
    text = "# Doc\n\n<!-- declared presets -->\nstale\n<!-- end declared -->\nkept\n"
    made = blocks.render(text)
    assert made == (
        "# Doc\n\n<!-- declared presets -->\n\n"
        + table("presets", DECLARATIONS)
        + "\n\n<!-- end declared -->\nkept\n"
    )
    assert "| `MIFA(lr, warmup, lr_schedule, max_staleness, cache_memory, cache_dir)` |" in made
    with pytest.raises(blocks.BlockError, match="3: no declared table 'knobs'; tables: run-con"):
        blocks.render("# Doc\n\n<!-- declared knobs -->\n<!-- end declared -->\n")
    with pytest.raises(blocks.BlockError, match="'<!-- end declared -->' closes no block"):
        blocks.render("<!-- end declared -->\n")


def test_the_run_config_table_gives_each_key_its_default_and_meaning():
    rows = table("run-config", DECLARATIONS).split("\n")
    assert rows[0] == "| key | default | values | meaning |"
    warmup = "| `mifa.warmup` | `false` | true or false | true: no step until every node has "
    assert warmup + "reported once |" in rows
    schedule = "| `mifa.lr-schedule` | `\"constant\"` | one of 'constant', 'inverse' | "
    assert any(row.startswith(schedule) for row in rows)
    assert (
        '| `asgd.lr` | `"auto"` | a number or \'auto\' | the server step, >= 0; "auto": `1/N` |'
        in rows
    )
    assert sum(row.startswith("| `fadas.") for row in rows) == len(DECLARATIONS["fadas"].hypers)
    assert len(rows) == 2 + sum(len(d.hypers) for d in DECLARATIONS.values())


def test_toml_values_are_written_as_toml_reads_them():
    assert [toml_value(v) for v in (False, 0, 2.0, 1e-8, "auto")] == [
        "false",
        "0",
        "2.0",
        "1e-08",
        '"auto"',
    ]


def test_a_declaration_out_of_shape_is_refused_naming_it():
    lr = Hyper("lr", 1.0, NUMBER, "the step")
    with pytest.raises(ValueError, match="snake_case, got 'buffer-size'"):
        Hyper("buffer-size", 1, INTEGER, "")
    with pytest.raises(ValueError, match=r"lr's default must be a bool, number, string or None"):
        Hyper("lr", [1.0], NUMBER, "")
    with pytest.raises(ValueError, match="lr's default 'auto' is not a number"):
        Hyper("lr", "auto", NUMBER, "")
    with pytest.raises(ValueError, match="choices go with kind 'choice' only"):
        Values("number", ("a",))
    with pytest.raises(ValueError, match="kind must be one of"):
        Values("real")
    with pytest.raises(ValueError, match="'FedX' needs 'fedx', got 'fx'"):
        Declaration("fx", "FedX", "FedX", "asynchronous", "", (lr,))
    with pytest.raises(ValueError, match=r"FedX declares \['lr'\] more than once"):
        Declaration("fedx", "FedX", "FedX", "asynchronous", "", (lr, lr))
    fedx = Declaration("fedx", "FedX", "FedX", "asynchronous", "", (lr,))
    with pytest.raises(ValueError, match="the rule 'fedx' is declared twice"):
        registry((fedx,), (fedx,))
    with pytest.raises(TypeError):
        fedx.defaults["lr"] = 2.0  # read-only: a preset's defaults cannot drift from it


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        (
            "mifa.lr-schedule",
            "x",
            "'mifa.lr-schedule' must be one of 'constant', 'inverse', 'default', got 'x'",
        ),
        ("mifa.lr", "fast", "'mifa.lr' must be a number, 'auto' or 'default', got 'fast'"),
        ("mifa.warmup", 1, "'mifa.warmup' must be true, false or 'default', got 1"),
        ("asgd.slack", 1.5, "'asgd.slack' must be an integer or 'default', got 1.5"),
        ("gsgm.cache-dir", 3, "'gsgm.cache-dir' must be a string or 'default', got 3"),
        ("fedbuff.lr", float("nan"), "'fedbuff.lr' must be a number or 'default', got nan"),
    ],
)
def test_the_run_config_checks_each_value_as_declared(key, value, message):
    with pytest.raises(ValueError) as error:
        parse_run_config({key: value})
    assert f"run config {message}" in str(error.value)


def test_declared_values_pass_as_they_are_and_default_everywhere():
    values = parse_run_config({"gsgm.lr": 1, "fedbuff.lr": 3, "asgd.lr": "default"}).values
    assert values["gsgm.lr"] == 1 and isinstance(values["gsgm.lr"], int)  # "auto" or any number
    assert values["fedbuff.lr"] == 3.0 and isinstance(values["fedbuff.lr"], float)
    assert values["asgd.lr"] == "default"  # any key: the preset's own default


def test_the_declared_choices_are_the_aggregators():
    """Stated as data, so that the ClientApp imports no aggregator; held equal here."""
    choices = {
        (n, h.name): h.values.choices
        for n, d in DECLARATIONS.items()
        for h in d.hypers
        if h.values.kind == "choice"
    }
    assert choices.pop(("gsgm", "server_optimizer")) == gsgm.SERVER_OPTIMIZERS
    assert choices.pop(("gsgm", "momentum_rule")) == gsgm.MOMENTUM_RULES
    assert choices.pop(("gsgm", "schedule")) == gsgm.SCHEDULES
    assert choices.pop(("trendsmooth", "base")) == trend_smooth.BASES
    assert choices.pop(("mifa", "lr_schedule")) == mifa.LR_SCHEDULES
    assert choices.pop(("fadas", "delay_rule")) == fadas.DELAY_RULES
    assert choices.pop(("fedbuff", "combine")) == choices.pop(("ssgd", "combine")) == COMBINES
    assert set(choices) == {
        (n, "staleness") for n, d in DECLARATIONS.items() if "staleness" in d.defaults
    }
    assert set(choices.values()) == {tuple(staleness._BY_NAME)}


def test_a_rule_declared_without_its_preset_exported_is_named(monkeypatch):
    lr = Hyper("lr", 1.0, NUMBER, "the step")
    fedx = Declaration("fedx", "FedX", "FedX", "asynchronous", "", (lr,))
    monkeypatch.setattr(strategies, "DECLARATIONS", {**DECLARATIONS, "fedx": fedx})
    with pytest.raises(ImportError, match=r"exports no class \['FedX'\] that a rule declares"):
        strategies._presets()
