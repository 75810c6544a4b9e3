"""facts: the facts mode's own rules, one module each (docs/design.md, section 7).

``phrases`` (open-vocabulary phrases of one document), ``terms`` (terms of any vocabulary
with their role cues), ``roles`` (the role histogram of the released terms),
``fact_clusters`` (clusters anchored on released terms and their noisy fact histograms) and
``fact_writer`` (fact selection and the notes: post-processing of released values). The
stages that run them are in ``pipeline.facts_stages``; what they share with the token mode
(keywords, vocabulary, histogram) stays in ``transforms``.
"""
