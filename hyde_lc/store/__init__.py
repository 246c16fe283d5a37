"""The store: a hyde_lc collection in Chroma with its BM25 index, and nothing else.

The only package that imports chromadb or tantivy. Where a collection lives
(`location`), what it records (`state`), the BM25 index beside it (`lexical_index`), the
hybrid collection with its one write path, change feed and audit (`collection`), and the
LangChain store on top of them (`chroma`: `open_store`, `HydeChroma`).
"""
