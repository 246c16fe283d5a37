"""Search: dense hits fused with BM25 hits, over any store.

A `backend.SearchBackend` is chosen once per store (a hyde_lc collection, or any LangChain
vector store with an optional in-memory BM25 index); `hybrid.HybridSearch` fuses its two
lists; `feedback` refines a first ranking (Rocchio, RM3); `lexical.LexicalSearch` brings a
BM25 side to a store of your own.
"""
