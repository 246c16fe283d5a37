"""The ground floor: what every layer above may use, and which uses nothing above it.

Settings from the environment (`settings`), the one file lock (`locks`), chunk identity
and the retrieved-chunk type (`chunks`), vector and ranking fusion (`fusion`), writing
systems (`language`), reasoning blocks in model output (`reasoning`) and cancelling
generations (`cancellation`). Nothing here imports chromadb, tantivy or a model runtime.
"""
