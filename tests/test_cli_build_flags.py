"""build-corpus's flags are BuildConfig's fields, and budget's mode options the build's."""

from __future__ import annotations

import argparse
from dataclasses import fields

from dpsynrag.cli.build import build_parser
from dpsynrag.cli.build_args import NOT_FLAGS, config_flags
from dpsynrag.pipeline.config import BuildConfig

# build-corpus's options that steer the command, not the build's configuration
COMMAND_OPTIONS = {"help", "version", "debug", "input", "out", "config", "state_dir",
                   "signing_key", "corpus_ledger", "dry_run", "force", "allow_empty",
                   "purge_state", "summary_json", "quiet", "verbose"}


def _options(parser: argparse.ArgumentParser) -> dict[str, argparse.Action]:
    return {action.dest: action for action in parser._actions}


def test_every_build_config_field_is_a_flag_or_listed_as_not_one() -> None:
    names = {f.name for f in fields(BuildConfig)}
    options = _options(build_parser())
    assert set(NOT_FLAGS) <= names
    for name in names:
        is_flag = name in config_flags()
        assert is_flag != (name in NOT_FLAGS), name
        if is_flag:
            assert name in options, f"BuildConfig.{name} has no build-corpus flag"
            assert name not in NOT_FLAGS
    assert not set(NOT_FLAGS) & set(options)


def test_every_build_flag_is_a_config_field_or_a_command_option() -> None:
    stray = set(_options(build_parser())) - set(config_flags()) - COMMAND_OPTIONS
    assert not stray, f"flags that set nothing: {sorted(stray)}"


def test_an_option_not_given_leaves_the_config_file_alone() -> None:
    # make_config reads None as "not given": a flag's default must never override --config
    options = _options(build_parser())
    for name in config_flags():
        assert options[name].default is None, name
    parsed = build_parser().parse_args(["notes.jsonl", "-o", "out"])
    assert all(getattr(parsed, name) is None for name in config_flags())


def test_a_flag_sets_its_field() -> None:
    from dpsynrag.pipeline.config import make_config

    parsed = build_parser().parse_args(["notes.jsonl", "-o", "out", "--K-e", "3",
                                        "--eps-theta", "0.3", "--generate", "facts",
                                        "--no-writer-keeps-note", "--facts-label", "Symptoms"])
    config = make_config(None, {name: getattr(parsed, name) for name in config_flags()})
    assert (config.K_e, config.eps_theta, config.facts_label) == (3, 0.3, "Symptoms")
    assert config.writer_keeps_note is False


def test_budget_mode_options_are_the_builds() -> None:
    from dpsynrag.cli import budget
    from dpsynrag.cli.options import Parser

    subparsers = Parser(prog="dpsynrag").add_subparsers(parser_class=Parser)
    budget.add_parser(subparsers)
    handler = subparsers.choices["budget"].get_default("handler")
    flags = handler.keywords["flags"]
    tokens = budget._given_flags(flags, {*BuildConfig.TOKENS_ONLY,
                                         *budget._PLANNER_TOKEN_OPTIONS})
    facts = budget._given_flags(flags, BuildConfig.FACTS_ONLY)
    # in the order the parser adds them: the order of the error messages
    assert tokens == {"K": "--K", "T": "--T", "eps_theta": "--eps-theta",
                      "rho_mean": "--rho-mean", "vocab_size": "--vocab-size"}
    assert facts == {"K_e": "--K-e", "share_roles": "--share-roles",
                     "share_hist": "--share-hist", "K_s": "--K-s", "R_f": "--R-f",
                     "delta_phrases": "--delta-phrases", "share_phrases": "--share-phrases",
                     "writer": "--writer", "share_tokens": "--share-tokens",
                     "facts_items": "--facts-items", "ngram_lengths": "--ngram-lengths",
                     "ngram_items": "--ngram-items", "share_ngrams": "--share-ngrams",
                     "ngram_weights": "--ngram-weights", "span_weights": "--span-weights"}
    shared = {"help", "generate", "epsilon", "delta", "L", "rho_hist", "conversion", "units",
              "json", "allow_large_epsilon"}
    assert set(flags) | {"help"} == shared | set(tokens) | set(facts)


def test_text_column_repeated_or_comma_separated() -> None:
    """--text-column may be repeated or take a comma-separated list (names stripped), in
    order; one name stays a plain string, so a one-column build's fingerprint is unchanged."""
    import pytest

    from dpsynrag.cli.errors import CliError
    from dpsynrag.pipeline.config import make_config

    def config_of(*flags: str) -> BuildConfig:
        parsed = build_parser().parse_args(["notes.jsonl", "-o", "out", *flags])
        return make_config(None, {name: getattr(parsed, name) for name in config_flags()})

    several = ("subject", "body", "resolution")
    assert config_of("--text-column", "subject", "--text-column", "body",
                     "--text-column", "resolution").text_column == several
    assert config_of("--text-column", "subject, body,resolution").text_column == several
    assert config_of("--text-column", "subject,body", "--text-column",
                     "resolution").text_column == several
    assert config_of("--text-column", "body,subject").text_column == ("body", "subject")
    assert config_of("--text-column", "body").text_column == "body"
    assert config_of("--text-column", " body ").text_column == " body "  # one name: as given
    assert config_of().text_column == "text"
    assert config_of("--text-column", "text").fingerprint() == config_of().fingerprint()
    assert config_of("--text-column", "text,body").fingerprint() != config_of().fingerprint()
    for flags in (["--text-column", "body", "--text-column", "body"],
                  ["--text-column", "subject,body,subject"], ["--text-column", "subject,"]):
        with pytest.raises(CliError, match="--text-column"):
            config_of(*flags)


def test_text_column_in_a_config_file_is_a_string_or_a_list(tmp_path) -> None:
    import pytest

    from dpsynrag.pipeline.config import ConfigError, make_config

    toml = tmp_path / "build.toml"
    for line, expected in (('text_column = "body"', "body"),
                           ('text_column = "subject, body"', ("subject", "body")),
                           ('text-column = ["subject", "body"]', ("subject", "body")),
                           ('text_column = ["body"]', "body"),
                           ('text_column = ["a,b", "c"]', ("a,b", "c"))):  # a list: verbatim
        toml.write_text(line + "\n")
        assert make_config(toml, {}).text_column == expected, line
    toml.write_text('text_column = ["subject"]\n')  # a flag replaces the file's list
    assert make_config(toml, {"text_column": ["a", "b"]}).text_column == ("a", "b")
    for line, message in (("text_column = 5", "expected a column name"),
                          ("text_column = []", "no text column"),
                          ('text_column = ["a", 1]', "must be a string"),
                          ('text_column = ["a", "a"]', "'a' is given twice"),
                          ('text_column = "a,,b"', "empty column name")):
        toml.write_text(line + "\n")
        with pytest.raises(ConfigError, match=f"--text-column: .*{message}"):
            make_config(toml, {})
