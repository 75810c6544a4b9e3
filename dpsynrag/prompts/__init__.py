"""prompts: the public prompt texts, on the lowest floor (see docs/design.md, section 7).

:mod:`~dpsynrag.prompts.templates` loads the packaged templates (``*.txt`` here);
:mod:`~dpsynrag.prompts.rag` builds the RAG answer prompts the evaluation and the query-time
mechanisms share; :mod:`~dpsynrag.prompts.query` the mechanisms' own. All public: prompts and
questions are public by the privacy model. Imports nothing else from dpsynrag.
"""
