"""``build-corpus``'s options: INPUT, OUT and one flag per ``BuildConfig`` field.

The flags that set a build option are the fields of ``pipeline.config.BuildConfig`` (minus
``NOT_FLAGS``), so a new option is a new field plus its ``add_argument`` here; a test fails
when the two disagree. The other flags (``--dry-run``, ``--force``, ...) steer the command.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from dpsynrag.cli.options import (
    ColumnList,
    open_unit_float,
    positive_float,
    positive_int,
    prompt_text,
    unit_float,
)
from dpsynrag.pipeline.defaults import DEFAULT_DELTA, DEFAULT_EPSILON

__all__ = ["EPILOG", "NOT_FLAGS", "add_build_arguments", "config_flags"]

# BuildConfig fields that are not flags: free-form extras, settable in --config only
NOT_FLAGS = ("extra",)

EPILOG = """\
Every option can also be set in the TOML file of --config (top level or a [build] table,
names as here without dashes, e.g. eps_theta = 0.4); flags override the file.

Exit codes: 0 built, 1 failed, 2 bad input or options, 3 refused by the privacy plan,
4 interrupted (run the same command again to resume; nothing is spent twice), 5 built but
useless: no synthetic text was kept (--allow-empty: exit 0).

Generation mode: --generate facts is the default (it measured better:
docs/evaluation.md#facts-mode-against-token-mode; both modes: docs/modes.md); an option only
the token mode reads (--K, --R, --k, --T, ...) without --generate selects --generate tokens,
the paper's algorithm. Each option's help says which mode reads it: "facts:" or "tokens:"
(none: both modes).

Examples:
  build-corpus notes.jsonl -o synth/ --unit-column patient_id           (facts)
  build-corpus notes.jsonl -o synth/ --keywords statistical --R 40 --k 20 (tokens)
"""



def config_flags() -> tuple[str, ...]:
    """The build options a flag sets: ``BuildConfig``'s fields, minus ``NOT_FLAGS``.

    A function, not a constant: ``pipeline.config`` loads scipy (through the conversions), and
    ``build-corpus --help`` should not wait for it."""
    from dataclasses import fields

    from dpsynrag.pipeline.config import BuildConfig

    return tuple(f.name for f in fields(BuildConfig) if f.name not in NOT_FLAGS)


def add_build_arguments(parser: argparse.ArgumentParser) -> None:
    """Add INPUT, ``--out``, ``--config`` and every build option to ``parser``.

    Each ``BuildConfig`` field is a flag of the same name (``eps_theta``: ``--eps-theta``)
    unless ``NOT_FLAGS`` lists it; ``tests/test_cli_build_flags.py`` holds both ways."""
    parser.add_argument("input", metavar="INPUT",
                        help="private documents: a .jsonl, .parquet or .csv file, or a "
                             "directory of .txt or .parquet files (with --ingest beam also a "
                             "file pattern on any filesystem Beam reads, e.g. gs://b/*.jsonl)")
    parser.add_argument("-o", "--out", type=Path, required=True, metavar="OUT",
                        help="output directory (written under a temporary name and renamed "
                             "when complete)")
    parser.add_argument("--config", type=Path, help="TOML file with any of these options")
    g = parser.add_argument_group("input")
    g.add_argument("--text-column", action=ColumnList, metavar="NAME[,NAME...]",
                   help="column/field holding the text (default: text); repeat it or give a "
                        "comma-separated list for several, whose non-empty values are joined "
                        "in that order by a blank line")
    g.add_argument("--id-column", help="column/field holding each record's id (default: id; "
                   "without it ids are derived from each record's content, never its position)")
    g.add_argument("--unit-column", help="column grouping records of one privacy unit (e.g. a "
                   "patient); each unit is bounded to one document (default: one record = one "
                   "unit)")
    g.add_argument("--max-chars", type=positive_int, help="skip (and count) longer documents "
                   "(default 20000)")
    g.add_argument("--unit-bound", choices=["pick", "concat"], help="how a unit with several "
                   "records becomes one document: pick the one with the smallest sha256(unit, "
                   "sha256(text)) (default), or concatenate them in that order up to "
                   "--max-chars")
    g.add_argument("--ingest", choices=["inline", "beam"], help="read the input in this "
                   "process (default) or with the Apache Beam ingest job (see 'dpsynrag ingest')")
    g.add_argument("--beam-runner", help="Beam runner for --ingest beam and --runner beam: "
                   "direct (default, on this machine), PortableRunner, FlinkRunner, "
                   "SparkRunner, DataflowRunner, ...")
    g.add_argument("--beam-options", help="Beam pipeline flags for --ingest beam and --runner "
                   "beam, one string, "
                   "e.g. \"--flink_master=host:8081 --parallelism=8\"")
    g.add_argument("--on-bad-row", choices=["fail", "skip"], help="--ingest beam: refuse an "
                   "input with a bad row (default) or drop bad rows and count them")
    g = parser.add_argument_group("privacy target and hyperparameters (the token mode's "
                                  "defaults are the paper's Table 6)")
    g.add_argument("--epsilon", type=positive_float,
                   help=f"target epsilon of the build (default {DEFAULT_EPSILON:g}, as "
                        "'dpsynrag budget')")
    g.add_argument("--delta", type=open_unit_float,
                   help=f"target delta (default {DEFAULT_DELTA:g}, as 'dpsynrag budget')")
    g.add_argument("--allow-large-epsilon", action="store_true", default=None,
                   help="build at an epsilon above 30 (measurement only: no useful privacy; "
                        "verify reports the corpus as not for release)")
    g.add_argument("--conversion", choices=["bun-steinke", "cks"],
                   help="zCDP to (epsilon, delta) conversion (default cks, the tighter; "
                        "bun-steinke is the paper's)")
    g.add_argument("--K", type=positive_int, metavar="N_KEYWORDS",
                   help="tokens: keywords per document (default 10; facts reads --K-s)")
    g.add_argument("--R", type=positive_int, metavar="N_CLUSTERS",
                   help="tokens: clusters = top-R noisy keywords (default 500)")
    g.add_argument("--L", type=positive_int,
                   help="maximum clusters per document (default: facts 1, tokens 5)")
    g.add_argument("--k", type=positive_int, metavar="N_DOCS",
                   help="tokens: retrieval target: documents per cluster (default 80)")
    g.add_argument("--T", type=positive_int, metavar="N_TOKENS",
                   help="tokens (and facts with --writer tokens): tokens generated per "
                        "cluster (default 70)")
    g.add_argument("--eps-theta", type=positive_float, help="tokens: epsilon of the similarity "
                   "threshold (default 0.4)")
    g.add_argument("--rho-hist", type=positive_float, help="rho of the keyword histogram "
                   "(default: facts --share-hist of the total rho; tokens 0.1)")
    g.add_argument("--rho-mean", type=positive_float, help="tokens: rho of each cluster's noisy "
                   "embedding sum (default 0.009)")
    g.add_argument("--clip", type=positive_float, help="tokens (and facts with --writer "
                   "tokens): logit clip c, at most 0.5 (the transform's rows never span more); "
                   "the temperature is c/(c/tau) (default 0.5)")
    g = parser.add_argument_group("generation mode")
    g.add_argument("--generate", choices=["tokens", "facts"],
                   help="facts (default): release terms of any vocabulary with their roles "
                        "by DP partition selection, cluster on them and write each "
                        "cluster's note from one noisy fact histogram (no LLM; pays per "
                        "fact, not per token; measured against tokens in "
                        "docs/evaluation.md, 'Facts mode against token mode'); tokens: the "
                        "paper's "
                        "private prediction, token by token. Without --generate, any "
                        "token-only option (--K, --R, --k, --T, --eps-theta, --rho-mean, "
                        "--clip, --keywords, the prompts, --no-filter, --no-retrieval) on the "
                        "command line or in --config means tokens")
    g.add_argument("--facts-items", choices=["terms", "open", "ngrams"],
                   help="facts: what a document offers for release: 'ngrams' (default; no "
                        "word list: the collection's own n-grams, released level by level by "
                        "DP n-gram extraction, each note stitched from its cluster's released "
                        "spans), 'terms' (the English lexicon pack: multi-word terms, names, "
                        "terms with digits, each with the role its cue word gives, e.g. "
                        "diagnosis, treatment) or 'open' (only invented or rare names and "
                        "codes, no roles)")
    g.add_argument("--ngram-lengths", metavar="N,N,...",
                   help="facts with ngrams: the n-gram lengths released level by level, "
                        "each at most twice the one before (default 1,2,4,8); a repeated "
                        "length is a second pass over the n-grams the first did not release")
    g.add_argument("--share-ngrams", type=open_unit_float,
                   help="facts with ngrams: the n-gram levels' share of the total rho; the "
                        "clusters' span histograms get the rest (default 0.6)")
    g.add_argument("--ngram-items", metavar="K,K,...",
                   help="facts with ngrams: n-grams each document offers at each level, one "
                        "per length (default 128 at every level, 32 with --ngram-weights "
                        "uniform); the levels share one noise scale")
    g.add_argument("--ngram-weights", choices=["uniform", "weighted"],
                   help="facts with ngrams: a document's m chosen n-grams weigh 1/sqrt(m) "
                        "each ('weighted', default: one l2 budget per document, so short "
                        "documents weigh more) or count 1 each ('uniform')")
    g.add_argument("--span-weights", choices=["uniform", "weighted"],
                   help="facts with ngrams: a document's m spans weigh 1/sqrt(m) each in its "
                        "clusters' histograms ('weighted', default: one l2 budget per document "
                        "and cluster, so a document with few spans weighs more) or count 1 "
                        "each ('uniform')")
    g.add_argument("--ngram-anchors", choices=["nearest", "rarest"],
                   help="facts with ngrams: which of its released anchors (the clusters) a "
                        "document joins: the rarest released one, anchors of two content "
                        "words first ('rarest', default) or the one the public embedder puts "
                        "nearest its text ('nearest': embeds every document, about 8x the "
                        "build time on CPU; the local runner only)")
    g.add_argument("--K-e", dest="K_e", type=positive_int,
                   help="facts: terms (or open phrases) per document (default: the most, up to "
                        "6, whose phrase release's tau_A stays <= 20 units, else 1; with the "
                        "other defaults 1 below epsilon 1.8, 2-5 up to 3.7, 6 from 3.7)")
    g.add_argument("--share-roles", type=unit_float,
                   help="facts with terms: share of the rho left after the keyword histogram "
                        "for the role histogram (default 0.1; 0: notes without roles)")
    g.add_argument("--share-hist", type=open_unit_float,
                   help="facts: the keyword histogram's share of the total rho when --rho-hist "
                        "is not given (default 0.04: the plan scales with epsilon)")
    g.add_argument("--K-s", dest="K_s", type=positive_int,
                   help="facts: statistical keywords per document in the histograms (default: "
                        "the most, up to 14, whose cluster fact histograms keep sigma_C <= 5, at "
                        "least 4; with the other defaults 4 below epsilon 2.5, 6 at 3, 14 from "
                        "4.4)")
    g.add_argument("--R-f", dest="R_f", type=positive_int,
                   help="facts: top noisy keywords added to the facts' domain (default 300)")
    g.add_argument("--share-phrases", type=open_unit_float,
                   help="facts: share of the rho left after the keyword histogram that goes "
                        "to the phrase release (default 0.3)")
    g.add_argument("--delta-phrases", type=open_unit_float,
                   help="facts: probability bound of releasing any phrase only one unit "
                        "holds; part of --delta (default delta/10)")
    g.add_argument("--writer", choices=["template", "tokens"],
                   help="facts: who writes each kept cluster's note: 'template' (default; "
                        "free, no LLM) or 'tokens' (the LLM rewrites the released note, "
                        "steered by the cluster's documents through the public-difference "
                        "sampler; T draws per cluster at c/tau, reads --T, --clip, "
                        "--rephrase-prompt, --response-prefix ({keyword} = the note's first "
                        "name), --public-top-k, --public-temperature; implies --generate "
                        "facts)")
    g.add_argument("--share-tokens", type=open_unit_float,
                   help="facts with --writer tokens: share of the rho left after the keyword "
                        "histogram for the token writer (default 0.3; the cluster facts get "
                        "1 - share-phrases - share-tokens)")
    g.add_argument("--writer-keeps-note", action=argparse.BooleanOptionalAction,
                   help="facts with --writer tokens: each corpus text is the writer's reply "
                        "followed by the cluster's released template note (free: post-"
                        "processing of released values; default off)")
    g.add_argument("--writer-ablate", metavar="LEVERS",
                   help="facts with --writer tokens: switch levers of the writer off for an "
                        "ablation, comma-separated: public-difference, top-k, public-facts, "
                        "candidates, trie, slot (public choices: the same draws and rho; "
                        "default none)")
    g.add_argument("--texts-per-cluster", type=positive_int,
                   help="facts with the template writer: texts written per kept cluster, each "
                        "naming all its released names and holding all its keywords (the "
                        "note, then names first or keywords reordered), so a cluster's texts "
                        "rank together and a reader sees them agree; free: post-processing; "
                        "default: 5; 1 for one note per cluster)")
    g.add_argument("--facts-label", help="facts: public lead word of every note, e.g. "
                   "'Symptoms' (default 'Reported')")
    g = parser.add_argument_group("token-mode stages (facts with --writer tokens reads "
                                  "--rephrase-prompt and --response-prefix)")
    g.add_argument("--keywords", choices=["llm", "statistical"],
                   help="tokens: keyword extraction by the LLM (the paper's; default) or the "
                        "document's rarest words by a public prior (much faster); facts "
                        "always uses statistical keywords (--K-s)")
    g.add_argument("--rephrase-prompt", type=prompt_text, help="tokens (and facts with "
                   "--writer tokens): stage (d) prompt with {document} (or @FILE; default: "
                   "the packaged rephrase prompt)")
    g.add_argument("--response-prefix", help="tokens (and facts with --writer tokens): public "
                   "text every synthetic reply starts with, e.g. 'The diagnosis is' (free: it "
                   "does not depend on the data; spares the first tokens a consensus of their "
                   "own); {keyword} becomes the cluster's released keyword (default: none)")
    g.add_argument("--keyword-prompt", type=prompt_text, help="tokens with --keywords llm: "
                   "stage (a) prompt with {K} and {document} (or @FILE; default: the packaged "
                   "keyword prompt)")
    g.add_argument("--filter-prompt", type=prompt_text, help="tokens: stage (e) YES/NO task "
                   "prompt with {document} (or @FILE; default: the paper's Medical Synth "
                   "prompt)")
    g.add_argument("--no-filter", action="store_true", default=None,
                   help="tokens: skip the self-filter (every text kept; default: filter)")
    g.add_argument("--no-retrieval", action="store_true", default=None,
                   help="tokens: ablation: predict from the whole cluster C_r (no stage (c); "
                        "its budget goes to prediction; default: retrieval)")
    g = parser.add_argument_group("public-difference token sampler (tokens; --public-top-k "
                                  "and --public-temperature also facts with --writer tokens)")
    g.add_argument("--public-prior", action="store_true", default=None,
                   help="tokens (default off): each document votes clamp(its logits - the "
                        "public logits) in [-c, c] on a public support, and the public "
                        "logits (the model on --public-document instead of a document) join "
                        "the votes at --public-temperature; same rho per token as the paper's "
                        "sampler")
    g.add_argument("--public-top-k", type=int, help="tokens with --public-prior, facts with "
                   "--writer tokens: sample among the public top-k tokens, EOS and the "
                   "released keyword's next tokens (default 50; public, so free)")
    g.add_argument("--public-temperature", type=float, help="tokens with --public-prior, facts "
                   "with --writer tokens: the public prior's temperature tau_pub (default 1; "
                   "its weight in the votes is tau / tau_pub)")
    g.add_argument("--public-document", type=prompt_text, help="tokens with --public-prior: "
                   "public text put in place of {document} for the public logits (or @FILE); "
                   "{keyword} becomes the cluster's released keyword (default: "
                   "'{keyword}')")
    g = parser.add_argument_group("models and execution")
    g.add_argument("--model", help="tokens (and facts with --writer tokens; the default facts "
                   "build loads no LLM): local Hugging Face directory or .gguf file (default: "
                   "the packaged SmolLM2-135M-Instruct)")
    g.add_argument("--embedder", help="local sentence-transformers directory: tokens clusters "
                   "with it, both modes index the corpus with it (default: the packaged "
                   "all-MiniLM-L6-v2)")
    g.add_argument("--device", choices=["cpu", "cuda"], help="default: cuda when present")
    g.add_argument("--dtype", choices=["float32", "bfloat16", "float16"],
                   help="default: bfloat16 on cuda, float32 on cpu")
    g.add_argument("--runner", choices=["auto", "ray", "local", "beam"], help="ray (model "
                   "actors on a Ray cluster), local (one process, no Ray), beam (the default "
                   "n-gram facts build's per-document work and counts on Apache Beam: "
                   "--beam-runner, --beam-options, --workers; runbooks/beam-cluster.md) or "
                   "auto (default): ray when the "
                   "build runs the language model (--generate tokens, --writer tokens) or is "
                   "given a Ray cluster (--ray-address, RAY_ADDRESS), else local")
    g.add_argument("--ray-address", help="attach to a Ray cluster (default: start a local one)")
    g.add_argument("--workers", type=positive_int, help="model actors (default: one per free GPU, "
                   "else 1); CPU actors share one node's free CPUs (runbooks/ray-cluster.md); "
                   "with --runner beam: Beam worker processes (default one per core)")
    g.add_argument("--batch-rows", type=positive_int, help="tokens (and facts with --writer "
                   "tokens): rows decoded together per worker, and the most rows that hold a KV "
                   "cache at once whatever a cluster's size (default 128 on CPU; on GPU sized "
                   "from free memory for the packed engine)")
    g.add_argument("--token-sampling", choices=["auto", "host", "device"],
                   help="tokens (and facts with --writer tokens): where each token is computed "
                        "from the ledger's uniform: host (the driver, from the votes relayed "
                        "every step), device (the model worker, exact float64 inverse CDF; "
                        "only uniforms and tokens cross), auto (default: device on CUDA "
                        "workers, else host); the same tokens either way")
    g.add_argument("--seed", type=int, help="TESTS ONLY: seeded noise; the certificate then says "
                   "'not for release'")
    g = parser.add_argument_group("state, signing and reporting")
    g.add_argument("--state-dir", type=Path, help="state directory (ledger and private "
                   "intermediates; 0700; default ./.dpsynrag-state/<OUT name>-<hash>)")
    g.add_argument("--signing-key", type=Path, help="Ed25519 private key (PEM) from 'dpsynrag "
                   "keygen'; its public key is KEY.pub next to it, as keygen writes it "
                   "(default: ~/.config/dpsynrag/signing_key.pem, created on first use with "
                   "signing_key.pem.pub; the summary says where the public key is)")
    g.add_argument("--corpus-ledger", type=Path, help="the private corpus's ledger, charged "
                   "with this build's whole planned spend before any private computation and "
                   "checked against its cap (exit 3 when it does not fit; default: derived from "
                   "INPUT in the config dir, see 'dpsynrag ledger show --corpus INPUT')")
    g.add_argument("--dry-run", action="store_true",
                   help="spend nothing: print the plan (rho per stage, epsilon under both "
                        "conversions, consensus rows, the clusters x rows x T shape), run "
                        "every check a build runs before spending (input, signing key, output "
                        "and state directories, free disk, corpus ledger cap, models and "
                        "device) and estimate the wall time on this machine from a quick "
                        "timing of the models on public text; exit 0 if all pass, else 2")
    g.add_argument("--force", action="store_true", help="replace an existing OUT")
    g.add_argument("--allow-empty", action="store_true",
                   help="exit 0 even when no synthetic text is kept (default: exit 5, a "
                        "useless corpus)")
    g.add_argument("--purge-state", action="store_true",
                   help="delete the state directory after a successful build")
    g.add_argument("--summary-json", type=Path,
                   help="also write the summary as JSON here (0600; operator-side: it holds "
                        "exact counts and the input's keyed hash, never publish it)")
    g.add_argument("--quiet", action="store_true", help="no progress bars")
    g.add_argument("--verbose", action="store_true",
                   help="print the exact input counts (records read, documents used, each "
                        "skip reason) and the warnings about them in the summary on stderr, "
                        "and progress bars with counts; they are not differentially private, "
                        "so by default they go to STATE/summary.json (0600) only and the "
                        "summary says so (stderr is often a shared log)")
