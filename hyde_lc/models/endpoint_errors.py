"""Errors from remote model endpoints, said plainly: which endpoint, what failed, what to do.

The OpenAI client raises its own exceptions (``APITimeoutError``, ``AuthenticationError``,
...) that name neither the model nor, often, the URL. `describe_endpoint_error` turns them
into the package's errors:

* `ModelConfigurationError`: the endpoint answered that the setup is wrong: the API key
  (401), the permission for this model (403), the model or URL (404). Retrying cannot
  help; the user must change the configuration.
* `ModelEndpointError`: the endpoint could not be reached, did not answer within the
  request timeout, limited the rate (429) or failed (5xx). These are transient.

Every remote request has a bounded timeout: ``HYDE_LC_REQUEST_TIMEOUT`` seconds (60 by
default), set by `hyde_lc.models.loading.load_llm` and `hyde_lc.models.loading.load_embeddings`.

Example:
    >>> from hyde_lc import load_llm
    >>> llm = load_llm("openai:llama@http://127.0.0.1:9/v1", max_retries=0)  # doctest: +SKIP
    >>> with endpoint_errors(llm, role="answer"):  # doctest: +SKIP
    ...     llm.invoke("hello")
    Traceback (most recent call last):
    hyde_lc.models.endpoint_errors.ModelEndpointError: cannot reach the answer model llama at ...

"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from hyde_lc.core.settings import settings
from hyde_lc.errors import HydeLcError

REQUEST_TIMEOUT_ENV = "HYDE_LC_REQUEST_TIMEOUT"
"""Environment variable with the timeout of every remote model request, in seconds."""
OPENAI_DEFAULT_BASE_URL = "https://api.openai.com/v1"
CONFIGURATION_STATUSES = (401, 403, 404)
"""HTTP statuses that mean the configuration is wrong (key, permission, model or URL)."""


class ModelEndpointError(HydeLcError):
    """A remote model endpoint failed: unreachable, too slow, rate-limited or broken."""

    def __init__(self, message: str, *, url: str | None = None, status: int | None = None):
        super().__init__(message)
        self.url = url
        self.status = status


class ModelConfigurationError(ModelEndpointError):
    """The endpoint rejected the setup: API key (401), permission (403), model or URL (404)."""


def request_timeout() -> float:
    """Seconds a remote model request may take: ``HYDE_LC_REQUEST_TIMEOUT`` or 60."""
    return settings().request_timeout


def _chain(exc: BaseException) -> Iterator[BaseException]:
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        yield current
        current = current.__cause__ or current.__context__


def status_of(exc: BaseException) -> int | None:
    """The HTTP status behind an exception (OpenAI, httpx and similar clients), if any."""
    for item in _chain(exc):
        for holder in (item, getattr(item, "response", None)):
            status = getattr(holder, "status_code", None)
            if isinstance(status, int):
                return status
    return None


def is_configuration_error(exc: BaseException) -> bool:
    """True for a 401, 403 or 404 from a model endpoint: retrying cannot help."""
    return status_of(exc) in CONFIGURATION_STATUSES


def _url(exc: BaseException, model: Any) -> str:
    """The endpoint as the user configured it (the spec's base URL), else the request's."""
    if isinstance(model, str):
        base = model.partition("@")[2] or None
    else:
        base = getattr(model, "openai_api_base", None) or getattr(model, "base_url", None)
    if base:
        return str(base)
    for item in _chain(exc):
        url = getattr(getattr(item, "request", None), "url", None)
        if url:
            return str(url)
    return OPENAI_DEFAULT_BASE_URL


def _what(model: Any, role: str | None) -> str:
    if isinstance(model, str):
        name = model
    else:
        name = str(
            getattr(model, "model_name", None)
            or getattr(model, "model", None)
            or type(model).__name__
        )
    kind = f"the {role} model" if role else "the model"
    return f"{kind} {name}"


def _message(exc: BaseException) -> str:
    body = getattr(exc, "body", None)
    if isinstance(body, dict):
        detail = body.get("error", body)
        if isinstance(detail, dict) and detail.get("message"):
            return str(detail["message"])
    return str(getattr(exc, "message", None) or exc)


def describe_endpoint_error(
    exc: BaseException, model: Any = None, *, role: str | None = None
) -> ModelEndpointError | None:
    """The package error for an exception a remote model raised, or None if it is not one.

    ``model`` is the chat model or embeddings object (or its spec string); ``role`` names
    its job in messages (``"hypothesis"``, ``"answer"``, ``"embedding"``).
    """
    try:
        import openai
    except ImportError:  # pragma: no cover - a core dependency
        return None
    if isinstance(exc, ModelEndpointError):
        return exc
    what = _what(model, role)
    url = _url(exc, model)
    status = status_of(exc)
    for item in _chain(exc):
        if isinstance(item, openai.APITimeoutError):
            limit = getattr(model, "request_timeout", None)
            within = f"within {limit} s" if isinstance(limit, int | float) else "in time"
            return ModelEndpointError(
                f"{what} at {url} did not answer {within}: is the server running and not "
                f"overloaded? Raise the limit with {REQUEST_TIMEOUT_ENV}=SECONDS, or use a "
                "local model",
                url=url,
            )
        if isinstance(item, openai.APIConnectionError):
            cause = item.__cause__ or item.__context__
            reason = f"{type(cause).__name__}: {cause}" if cause else _message(item)
            return ModelEndpointError(
                f"cannot reach {what} at {url} ({reason}): is the server running at that "
                "address? Check the URL in the model spec (openai:MODEL@http://HOST:PORT/v1)",
                url=url,
            )
    if status is None:
        return None
    detail = _message(exc)
    if status == 401:
        fix = (
            "set OPENAI_API_KEY (or api_key=...) to a valid key for this endpoint, or use a "
            "local model"
        )
        text = f"{what} at {url} rejected the API key (401 Unauthorized: {detail}): {fix}"
        return ModelConfigurationError(text, url=url, status=status)
    if status == 403:
        text = (
            f"{what} at {url} refused access (403 Forbidden: {detail}): the API key has no "
            "permission for this model; use a key that has, or another model"
        )
        return ModelConfigurationError(text, url=url, status=status)
    if status == 404:
        text = (
            f"{what} at {url} was not found (404: {detail}): check the model name and that "
            "the base URL ends in /v1 (openai:MODEL@http://HOST:PORT/v1)"
        )
        return ModelConfigurationError(text, url=url, status=status)
    if status == 429:
        text = f"{what} at {url} is limiting requests (429: {detail}): wait and try again"
        return ModelEndpointError(text, url=url, status=status)
    if status >= 500:
        text = f"{what} at {url} failed (server error {status}: {detail}): try again later"
        return ModelEndpointError(text, url=url, status=status)
    return ModelEndpointError(
        f"{what} at {url} refused the request ({status}: {detail})", url=url, status=status
    )


@contextmanager
def endpoint_errors(model: Any = None, *, role: str | None = None) -> Iterator[None]:
    """Re-raise remote model failures in the block as errors naming the model and URL.

    A failure becomes `ModelEndpointError` (`ModelConfigurationError` for 401/403/404);
    the package's own errors and unrelated exceptions pass unchanged.

    Example:
        >>> with endpoint_errors("openai:gpt-4o-mini", role="answer"):
        ...     pass

    """
    try:
        yield
    except HydeLcError:
        raise
    except Exception as exc:
        error = describe_endpoint_error(exc, model, role=role)
        if error is None:
            raise
        raise error from exc
