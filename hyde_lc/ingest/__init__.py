"""Ingestion: files (`files.ingest_paths`) and LangChain Documents (`documents.ingest_documents`).

Files are read (`reading`) and split (`splitting`) here; every write goes through the
store's one write path.
"""
