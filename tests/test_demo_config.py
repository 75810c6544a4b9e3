"""``make demo``'s pieces that can drift apart: its build file is the default facts mode at a
delta below 1/N, and the three questions it asks are in the dataset it generates."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from dpsynrag.eval.datasets_ordinary import make_ordinary_dataset, save_dataset
from dpsynrag.pipeline.config import make_config

ROOT = Path(__file__).resolve().parent.parent
DEMO_NOTES = 4000  # `dpsynrag dataset conditions --notes 4000 --seed 0` in the Makefile


def _makefile_value(name: str) -> str:
    match = re.search(rf"^{name} := (.*)$", (ROOT / "Makefile").read_text(), re.MULTILINE)
    assert match, f"Makefile has no {name}"
    return match.group(1).strip()


def test_the_demo_builds_in_the_default_facts_mode() -> None:
    config = make_config(ROOT / "examples" / "demo" / "facts.toml", {})
    default = make_config(None, {})
    assert config.generate == default.generate == "facts"
    assert config.writer == default.writer  # the default template writer
    assert config.epsilon == 10.0 and config.delta < 1 / DEMO_NOTES
    assert config.unit_column == "unit"
    makefile = (ROOT / "Makefile").read_text()
    assert f"--notes {DEMO_NOTES} --seed 0" in makefile
    assert "--config examples/demo/facts.toml" in makefile


def test_the_demo_questions_are_in_the_generated_queries(tmp_path: Path) -> None:
    ids = _makefile_value("DEMO_QUESTIONS").split()
    assert len(ids) == 3
    data = make_ordinary_dataset("conditions", n_notes=DEMO_NOTES, seed=0)
    queries = save_dataset(data, tmp_path)["queries"]
    shown = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "demo" / "questions.py"), str(queries), *ids],
        capture_output=True, text=True, timeout=60, check=True)
    questions = shown.stdout.splitlines()
    assert len(questions) == 3 and all(q.endswith("?") for q in questions)
    by_id = {q.id: q for q in data.queries}
    assert questions == [by_id[i].question for i in ids]
    assert not any(re.search(r"\bI(?:'m| am) [A-Z]", q) for q in questions)  # no names
    missing = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "demo" / "questions.py"), str(queries),
         "q-9999"], capture_output=True, text=True, timeout=60)
    assert missing.returncode == 2 and "no query q-9999" in missing.stderr
