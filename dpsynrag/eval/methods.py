"""The evaluation's method names (``dpsynrag eval --methods``); see ``eval.harness``.

A module of its own, without numpy or the models, so that the command line can list the
methods in its help without loading the harness.
"""

from __future__ import annotations

__all__ = ["ALL_METHODS", "CEILING_METHODS", "METHODS", "PRIVATE_METHODS", "QUERY_METHODS",
           "TOKENS_CEILING_EPSILON"]

# query-time mechanisms over the private notes (``eval.query_methods``)
QUERY_METHODS = ("dp-rag", "dp-ksa", "sparse-vote")
METHODS = ("non-rag", "rag", "dp-synth", "dp-synrag", "dp-synrag-hard", "dp-synrag-no-filter",
           "dp-synrag-no-retrieval", "dp-rag", "dp-ksa", "sparse-vote", "dp-synrag-facts",
           "dp-synrag-writer")
PRIVATE_METHODS = METHODS[2:]
# epsilon = infinity ceilings of a generator: the same pipeline and writer on exact counts
CEILING_METHODS = ("facts-ceiling", "tokens-ceiling")
# the token mode's ceiling: the same build at a budget where the noise no longer matters
TOKENS_CEILING_EPSILON = 1e6
ALL_METHODS = (*METHODS, *CEILING_METHODS)
