"""What the commands' help says: the default (facts) mode first, each option's mode and real
default, the defaults budget shares with build-corpus, and no issue numbers anywhere."""

from __future__ import annotations

import argparse
import json
import re

import pytest

from dpsynrag.cli import main
from dpsynrag.cli.build import build_parser
from dpsynrag.facts.fact_writer import TEXTS_PER_CLUSTER
from dpsynrag.pipeline.config import FACTS_DEFAULT_L, TOKENS_RHO_HIST, BuildConfig
from dpsynrag.pipeline.defaults import DEFAULT_DELTA, DEFAULT_EPSILON


def _helps(parser: argparse.ArgumentParser) -> dict[str, str]:
    return {action.dest: action.help or "" for action in parser._actions}


def _every_parser() -> dict[str, argparse.ArgumentParser]:
    """build-corpus and every ``dpsynrag`` command (subcommands of subcommands included)."""
    from dpsynrag.cli.app import build_parser as app_parser

    found: dict[str, argparse.ArgumentParser] = {"build-corpus": build_parser()}
    todo = [app_parser()]
    while todo:
        parser = todo.pop()
        found[parser.prog] = parser
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                todo.extend(action.choices.values())
    return found


def test_build_help_describes_the_default_facts_mode_and_tokens_as_the_alternative() -> None:
    parser = build_parser()
    description = " ".join((parser.description or "").split())
    facts, tokens = description.find("--generate facts"), description.find("--generate tokens")
    assert 0 <= facts < tokens, description
    assert "default mode, --generate facts, uses no language model" in description
    assert "alternative, --generate tokens" in description
    assert "(paper; default)" not in parser.format_help()


def test_every_option_only_one_mode_reads_says_which() -> None:
    helps = _helps(build_parser())
    for name in BuildConfig.TOKENS_ONLY:
        assert helps[name].startswith("tokens"), (name, helps[name])
    for name in BuildConfig.FACTS_ONLY:
        assert helps[name].startswith("facts"), (name, helps[name])


@pytest.mark.parametrize("name", ["K", "R", "k", "T", "eps_theta", "rho_mean", "clip",
                                  "max_chars", "R_f", "share_phrases", "share_roles",
                                  "share_hist", "share_tokens", "public_top_k", "epsilon", "delta"])
def test_build_help_gives_the_configs_defaults(name: str) -> None:
    default = getattr(BuildConfig, name)
    help_text = " ".join(_helps(build_parser())[name].split())
    assert re.search(rf"\bdefault {re.escape(f'{default:g}')}\b", help_text), (name, help_text)


def test_build_help_gives_the_mode_dependent_defaults() -> None:
    helps = {name: " ".join(text.split()) for name, text in _helps(build_parser()).items()}
    assert f"default: facts {FACTS_DEFAULT_L}, tokens {BuildConfig.L}" in helps["L"]
    assert f"tokens {TOKENS_RHO_HIST:g}" in helps["rho_hist"]
    assert BuildConfig.keywords == "llm"
    assert helps["keywords"].startswith("tokens: keyword extraction by the LLM (the paper's; "
                                        "default)")
    assert f"default '{BuildConfig.facts_label}'" in helps["facts_label"]
    assert f"default: {TEXTS_PER_CLUSTER};" in helps["texts_per_cluster"]


def test_no_help_names_an_issue_number() -> None:
    for prog, parser in _every_parser().items():
        shown = " ".join(parser.format_help().split())
        assert not re.search(r"issue \d", shown, re.IGNORECASE), (prog, shown)


def test_the_budget_table_names_no_issue_number(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["budget", "--writer", "tokens", "--facts-items", "terms"]) == 0
    shown = capsys.readouterr().out
    assert "token writer" in shown and not re.search(r"issue \d", shown, re.IGNORECASE)


def test_budget_defaults_epsilon_and_delta_to_build_corpus(
        capsys: pytest.CaptureFixture[str]) -> None:
    assert (BuildConfig.epsilon, BuildConfig.delta) == (DEFAULT_EPSILON, DEFAULT_DELTA)
    assert main(["budget", "--json"]) == 0
    plan = json.loads(capsys.readouterr().out)
    assert (plan["epsilon"], plan["delta"]) == (DEFAULT_EPSILON, DEFAULT_DELTA)
    assert main(["budget", "--generate", "tokens", "--json"]) == 0
    plan = json.loads(capsys.readouterr().out)
    assert (plan["epsilon"], plan["delta"]) == (DEFAULT_EPSILON, DEFAULT_DELTA)
    budget = _every_parser()["dpsynrag budget"]
    for name, value in (("epsilon", DEFAULT_EPSILON), ("delta", DEFAULT_DELTA)):
        text = " ".join(_helps(budget)[name].split())
        assert f"default {value:g}, as build-corpus" in text, text
