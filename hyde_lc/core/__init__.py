"""The ground floor: what every layer above may use, and which uses nothing above it.

Settings from the environment (`settings`), the one file lock (`locks`), settings checked
on assignment (`checked`), chunk identity and the retrieved-chunk type (`chunks`), vector
and ranking fusion (`fusion`), writing systems (`language`), reasoning blocks in model
output (`reasoning`), cancelling generations (`cancellation`), the cores other work
leaves free (`cpu`) and packages whose public names load on first use (`lazy`). Nothing
here imports chromadb, tantivy or a model runtime.
"""
