"""HyDE: a question -> hypothetical passages -> search vector(s).

`prompts` (what the writer is asked), `hypotheses` (writing them, with cache, timeout and
fallbacks), `transform.HyDETransform` (write, embed, fuse) and `embeddings.HyDEEmbeddings`
(the transform as a LangChain ``Embeddings``).
"""
