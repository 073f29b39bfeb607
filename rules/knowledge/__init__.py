"""What pmap-migrate knows of JAX, as data: the qualified names of pmap and its helpers, the options and APIs each release removed and what replaces them (`tables`), and what the prefilter reads of each rule (`gates`). Nothing here imports libcst, so that a run the cache or the prefilter answers can use it without loading the analysis.
"""
