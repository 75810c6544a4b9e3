"""The command line: `dpsynrag budget` output, and one-line errors without tracebacks."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from dpsynrag.cli import main

TABLE6 = ["budget", "--epsilon", "10", "--delta", "1e-3", "--K", "10", "--L", "5", "--T", "70",
          "--eps-theta", "0.4", "--rho-hist", "0.1", "--rho-mean", "0.009"]


def run_console_script(*args: str) -> subprocess.CompletedProcess[str]:
    script = Path(sys.executable).with_name("dpsynrag")
    command = [str(script)] if script.exists() else [sys.executable, "-m", "dpsynrag.cli"]
    return subprocess.run([*command, *args], capture_output=True, text=True, timeout=120)


def test_budget_json_has_the_documented_keys_and_values() -> None:
    result = run_console_script(*TABLE6, "--conversion", "bun-steinke", "--json")
    assert result.returncode == 0, result.stderr
    plan = json.loads(result.stdout)
    for key in ("rho_total", "sigma_h", "sigma_mu", "rho_retrieval", "rho_prediction",
                "c_over_tau", "epsilon", "delta", "conversion"):
        assert key in plan
    assert plan["rho_total"] == pytest.approx(2.2012, abs=5e-5)
    assert plan["c_over_tau"] == pytest.approx(0.1057, abs=5e-5)
    assert plan["conversion"] == "bun-steinke"


def test_budget_text_is_a_table_of_where_the_budget_goes(capsys: pytest.CaptureFixture[str]
                                                         ) -> None:
    assert main([*TABLE6, "--conversion", "cks"]) == 0
    out = capsys.readouterr().out
    for fragment in ("histogram", "threshold", "prediction", "2.6068", "0.1162", "cks",
                     "consensus"):
        assert fragment in out


@pytest.mark.parametrize(
    "args,fragment",
    [
        ([*TABLE6[:2], "-3", *TABLE6[3:]], "--epsilon"),
        ([*TABLE6[:4], "1.5", *TABLE6[5:]], "--delta"),
        ([*TABLE6[:2], "ten", *TABLE6[3:]], "not a number"),
        ([*TABLE6, "--conversion", "rdp"], "--conversion"),
        ([*TABLE6[:7], "--K-e", "2"], "--generate"),  # a token and a facts option: say which
    ],
)
def test_bad_input_is_one_line_exit_2_no_traceback(args: list[str], fragment: str) -> None:
    result = run_console_script(*args)
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("dpsynrag: error:")
    assert fragment in lines[0]
    assert "Traceback" not in result.stderr
    assert result.stdout == ""


def test_impossible_plan_exits_1_with_the_reason() -> None:
    result = run_console_script(*TABLE6[:2], "0.5", *TABLE6[3:])
    assert result.returncode == 1
    assert "nothing is left for private prediction" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_build_corpus_without_arguments_is_a_one_line_usage_error() -> None:
    script = Path(sys.executable).with_name("build-corpus")
    if not script.exists():
        pytest.skip("console scripts not installed next to this interpreter")
    result = subprocess.run([str(script)], capture_output=True, text=True, timeout=60)
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("build-corpus: error:")
    assert "INPUT" in lines[0] or "--out" in lines[0]
    assert "Traceback" not in result.stderr


def test_help_lists_the_budget_command(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["--help"])
    assert exit_info.value.code == 0
    assert "budget" in capsys.readouterr().out


def test_budget_warns_when_delta_exceeds_one_over_the_stated_units(
        capsys: pytest.CaptureFixture[str]) -> None:
    base = ["budget", "--generate", "facts", "--epsilon", "10", "--L", "2", "--rho-hist", "0.1"]
    assert main([*base, "--delta", "1e-3", "--units", "5000"]) == 0
    assert "exceeds 1/N" in capsys.readouterr().err
    assert main([*base, "--delta", "1e-4", "--units", "5000"]) == 0
    assert "warning" not in capsys.readouterr().err
    assert main([*base, "--delta", "1e-3", "--units", "5000", "--json"]) == 0
    assert "exceeds 1/N" in json.loads(capsys.readouterr().out)["delta_warning"]


def test_abbreviated_options_are_refused_not_guessed(capsys: pytest.CaptureFixture[str]) -> None:
    # budget has --R-f but no --R: argparse would read "--R 48" as "--R-f 48"
    base = ["budget", "--generate", "facts", "--epsilon", "10", "--delta", "1e-3"]
    assert main([*base, "--R", "48"]) == 2
    err = capsys.readouterr().err
    assert "unrecognized arguments: --R 48" in err and "Traceback" not in err
    assert main([*base, "--R-f", "48", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["R_f"] == 48


def test_budget_defaults_are_build_corpus_defaults(capsys: pytest.CaptureFixture[str]) -> None:
    from dpsynrag.pipeline.config import BuildConfig

    assert main(["budget", "--generate", "tokens", "--epsilon", "10", "--delta", "1e-3",
                 "--json"]) == 0
    plan = json.loads(capsys.readouterr().out)
    for name in ("K", "L", "T", "eps_theta", "rho_mean"):
        assert plan[name] == getattr(BuildConfig, name), name
    assert plan["rho_hist"] == BuildConfig().tokens_rho_hist == 0.1  # the paper's
    explicit = ["budget", "--epsilon", "10", "--delta", "1e-3", "--K", "10", "--L", "5", "--T",
                "70", "--eps-theta", "0.4", "--rho-hist", "0.1", "--rho-mean", "0.009", "--json"]
    assert main(explicit) == 0
    assert json.loads(capsys.readouterr().out) == plan


def test_dpsynrag_build_is_build_corpus(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["build"]) == 2
    assert "dpsynrag build: error: the following arguments are required: INPUT" in \
        capsys.readouterr().err
    with pytest.raises(SystemExit) as exit_info:
        main(["--help"])
    assert exit_info.value.code == 0
    assert "build-corpus" in capsys.readouterr().out
    for script in ("dpsynrag", "build-corpus"):
        path = Path(sys.executable).with_name(script)
        if path.exists():
            shown = subprocess.run([str(path), "--version"], capture_output=True, text=True,
                                   timeout=120)
            assert shown.returncode == 0 and shown.stdout.startswith("dpsynrag "), script


def test_build_summary_tells_records_from_documents(capsys: pytest.CaptureFixture[str],
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    from dpsynrag.cli.build_report import print_summary

    monkeypatch.setenv("COLUMNS", "400")  # the table's rows on one line each

    summary = {
        "documents_in": 177, "skipped": {"unit_bound": 120, "too_long": 3, "empty": 0},
        "synthetic_texts": 12, "kept_texts": 12, "rho_spent": 2.6, "delta": 1e-3,
        "conversion": "cks", "epsilon": 9.999999999999998, "epsilon_other": {"bun-steinke": 11.1},
        "stage_seconds": {}, "resumed": False, "seeded": False, "signing_key_created": False,
        "signing_key_fingerprint": "ab12", "out_dir": "out", "lifetime_epsilon": 43.3,
        "lifetime_delta": 1e-3, "lifetime_cap_epsilon": None}
    print_summary(summary, verbose=True)
    shown = " ".join(capsys.readouterr().err.split())
    assert "records read │ 300" in shown
    assert "documents used (one per privacy unit) │ 177" in shown
    assert "(cks) │ 10 │" in shown and "9.9999" not in shown
    assert "corpus lifetime epsilon │ 43.3 (no cap)" in shown
    # without --verbose: no exact count, only where the counts are
    print_summary(summary, counts_at=Path("state/summary.json"))
    shown = " ".join(capsys.readouterr().err.split())
    assert "300" not in shown and "177" not in shown and "120" not in shown
    assert "input counts (records, documents, skips) │ in state/summary.json (private)" in shown


def test_a_token_plan_below_consensus_is_warned_from_public_values() -> None:
    from dpsynrag.cli.build_report import plan_warning
    from dpsynrag.pipeline.config import make_config

    weak = make_config(None, {"generate": "tokens", "k": 10, "L": 5, "T": 70})
    message = plan_warning(weak)
    assert message is not None and "--k 10" in message and "agreeing rows" in message
    assert plan_warning(make_config(None, {"generate": "tokens", "k": 40, "L": 2,
                                           "T": 32})) is None
    assert plan_warning(make_config(None, {"generate": "facts"})) is None


def test_model_loading_shows_no_progress_bars_of_its_own() -> None:
    from transformers.utils import logging as transformers_logging

    from dpsynrag.models.devices import quiet_model_loading

    transformers_logging.enable_progress_bar()
    quiet_model_loading()
    assert not transformers_logging.is_progress_bar_enabled()


def test_budget_plans_the_ngram_levels_as_a_build_does(capsys: pytest.CaptureFixture[str]
                                                       ) -> None:
    from dpsynrag.pipeline.build import make_plan
    from dpsynrag.pipeline.config import make_config

    args = ["budget", "--generate", "facts", "--facts-items", "ngrams", "--epsilon", "3",
            "--ngram-lengths", "1,2,4", "--ngram-items", "32,16,8"]
    assert main([*args, "--json"]) == 0
    plan = json.loads(capsys.readouterr().out)
    build = make_plan(make_config(None, {"generate": "facts", "facts_items": "ngrams",
                                         "epsilon": 3.0, "ngram_lengths": "1,2,4",
                                         "ngram_items": "32,16,8"}))
    assert plan["ngram_lengths"] == [1, 2, 4] and plan["ngram_items"] == [32, 16, 8]
    assert plan["ngram_thresholds"] == list(build.ngram_thresholds)
    assert plan["rho_total"] == pytest.approx(build.rho_total)
    assert main(args) == 0
    assert "2-grams K 16 tau" in capsys.readouterr().out
    assert main(["budget", "--generate", "facts", "--facts-items", "terms", "--ngram-items",
                 "8,8"]) == 2
    assert "apply only to --facts-items ngrams" in capsys.readouterr().err


def test_budget_plans_open_phrases_as_a_build_does(capsys: pytest.CaptureFixture[str]) -> None:
    from dpsynrag.pipeline.build import make_plan
    from dpsynrag.pipeline.config import make_config

    assert main(["budget", "--facts-items", "open", "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    build = make_plan(make_config(None, {"facts_items": "open"})).as_dict()
    assert shown.get("share_roles") == build.get("share_roles")  # no role histogram
    assert shown["sigma_C"] == build["sigma_C"] and shown["rho_A"] == build["rho_A"]
