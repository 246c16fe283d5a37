"""The LangChain retrievers: `hyde.HyDERetriever` and `neighbors.NeighborExpandingRetriever`."""
