"""dpsynrag: differentially private synthetic RAG corpora (DP-SynRAG)."""

__version__ = "0.1.0"
