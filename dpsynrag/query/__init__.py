"""Query-time DP mechanisms over the PRIVATE corpus, charged to its ledger.

DP-RAG (Grislain), DP-KSA (Tang et al.) and (Sparse)VoteRAG (Koga et al.), sharing the
accounting (``dpsynrag.accounting``) and the decoding engine (``dpsynrag.transforms``).
Each mechanism's ``answer`` consumes one receipt of a committed corpus-ledger charge per
question before it reads the corpus (``QueryService`` charges and answers in one step).
Random-projection retrieval (Yao & Li) is deliberately absent: its DP claim does not hold
(docs/mechanisms.md, section 15; docs/modes.md#query-time-answering-from-the-private-corpus).
"""

from typing import Any

__all__ = ["METHODS", "QueryResult", "QueryService", "make_settings"]


def __getattr__(name: str) -> Any:
    """Import the service (and with it torch) only when it is used, not for ``--help``."""
    if name in __all__:
        # loads torch and transformers: imported when this runs, not with this module
        from dpsynrag.query import service

        return getattr(service, name)
    raise AttributeError(f"module 'dpsynrag.query' has no attribute {name!r}")
