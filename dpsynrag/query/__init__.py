"""Query-time DP mechanisms over the PRIVATE corpus, charged to its ledger.

DP-RAG (Grislain), DP-KSA (Tang et al.) and (Sparse)VoteRAG (Koga et al.), sharing the
accounting (``dpsynrag.accounting``) and the decoding engine (``dpsynrag.transforms``).
Random-projection retrieval (Yao & Li) is deliberately absent: its DP claim does not hold
(mechanism-specs.md section 4.6); see the README.
"""

from dpsynrag.query.service import METHODS, QueryResult, QueryService, make_settings

__all__ = ["METHODS", "QueryResult", "QueryService", "make_settings"]
