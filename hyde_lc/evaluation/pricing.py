"""What a stage cost: token counts times a dated pricing table, never a guess.

The table (``hyde_lc/data/pricing.json``) lists USD per million tokens for common OpenAI
models, with the date it was read. ``HYDE_LC_PRICING=/path/to/pricing.json`` replaces it
(same format: ``{"as_of": DATE, "models": {NAME: {"input": USD, "output": USD}}}``). A
table that cannot be read or has another shape is a `HydeLcError` naming the file (and the
variable), raised by `PricingTable.load`, so a run checks it before it asks anything. Local
models cost 0; a model the table does not list costs ``None`` with ``source="unknown"``.

Example:
    >>> from hyde_lc.evaluation.pricing import stage_cost
    >>> stage_cost("openai", "gpt-4o-mini-2024-07-18", 1_000_000, 0).usd
    0.15
    >>> stage_cost("local", "qwen2.5-coder-1.5b", 500, 200).source
    'local model (no charge)'
    >>> stage_cost("openai", "my-finetune", 10, 10).usd is None
    True

"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any

from hyde_lc.core.settings import settings
from hyde_lc.errors import HydeLcError

PRICING_ENV = "HYDE_LC_PRICING"
LOCAL_SOURCE = "local model (no charge)"
UNKNOWN_SOURCE = "unknown"
_DATE_SUFFIX = re.compile(r"-\d{4}-\d{2}-\d{2}$")


@dataclass(frozen=True)
class Price:
    """USD per million input and output tokens."""

    input_per_million: float
    output_per_million: float


@dataclass(frozen=True)
class Cost:
    """A cost in USD (``None`` when unknown) and where the figure came from."""

    usd: float | None
    source: str


@dataclass(frozen=True)
class PricingTable:
    """Prices per model, read on ``as_of`` from ``source``.

    Example:
        >>> table = PricingTable.load()
        >>> table.price("gpt-4o-mini").output_per_million
        0.6

    """

    as_of: str
    source: str
    prices: dict[str, Price]

    @classmethod
    def load(cls, path: str | Path | None = None) -> PricingTable:
        """The table at ``path``, else ``$HYDE_LC_PRICING``, else the bundled one.

        Raises `HydeLcError` naming the file (and ``HYDE_LC_PRICING`` when it chose the
        file) if the table is missing, not JSON, or not of the documented shape.
        """
        if path:
            return _load(str(path), f"the pricing table {path}")
        chosen = settings().pricing
        if chosen is not None:
            return _load(str(chosen), f"{PRICING_ENV}={chosen}")
        return _load(None, "the bundled pricing table")

    def price(self, model: str) -> Price | None:
        """The price of ``model``; dated snapshots (``-2024-07-18``) use their base model."""
        name = model.rsplit(":", 1)[-1].strip()
        return self.prices.get(name) or self.prices.get(_DATE_SUFFIX.sub("", name))

    @property
    def label(self) -> str:
        """``pricing table (as of DATE)``, the ``cost_source`` of priced stages."""
        return f"pricing table (as of {self.as_of})"


@lru_cache(maxsize=8)
def _load(path: str | None, origin: str) -> PricingTable:
    """Read and check a table; ``origin`` names it in errors (errors are not cached)."""
    fix = (
        f"point {PRICING_ENV} at a JSON file shaped like hyde_lc/data/pricing.json, or unset it"
        if origin.startswith(PRICING_ENV)
        else "give a JSON file shaped like hyde_lc/data/pricing.json"
    )
    try:
        if path is None:
            text = (resources.files("hyde_lc") / "data" / "pricing.json").read_text("utf-8")
        else:
            text = Path(path).read_text("utf-8")
    except FileNotFoundError:
        raise HydeLcError(f"{origin}: no such file; {fix}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise HydeLcError(f"{origin} cannot be read ({exc}); {fix}") from exc
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as exc:
        raise HydeLcError(
            f"{origin} is not valid JSON ({exc.msg}, line {exc.lineno}); {fix}"
        ) from exc
    if not isinstance(raw, dict):
        raise HydeLcError(f"{origin} must be a JSON object, not {type(raw).__name__}; {fix}")
    as_of = raw.get("as_of")
    if isinstance(as_of, bool) or not isinstance(as_of, str | int) or not str(as_of).strip():
        raise HydeLcError(f'{origin} needs "as_of": the date the prices were read; {fix}')
    return PricingTable(
        as_of=str(as_of), source=str(raw.get("source", "")), prices=_prices(raw, origin, fix)
    )


def _prices(raw: dict[str, Any], origin: str, fix: str) -> dict[str, Price]:
    models = raw.get("models")
    if not isinstance(models, dict):
        raise HydeLcError(
            f'{origin}: "models" must map model names to {{"input": USD, "output": USD}} '
            f"(per million tokens); {fix}"
        )
    prices = {}
    for name, entry in models.items():
        rates = entry if isinstance(entry, dict) else {}
        checked: list[float] = []
        for key, value in (("input", rates.get("input")), ("output", rates.get("output", 0))):
            if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
                raise HydeLcError(
                    f'{origin}: models["{name}"]["{key}"] must be a number of USD per million '
                    f"tokens (0 or more), got {json.dumps(value)}; {fix}"
                )
            checked.append(float(value))
        prices[name] = Price(*checked)
    return prices


def stage_cost(
    provider: str,
    model: str,
    input_tokens: int,
    output_tokens: int,
    table: PricingTable | None = None,
) -> Cost:
    """The cost of one stage's tokens on ``provider:model``."""
    if provider == "local":
        return Cost(0.0, LOCAL_SOURCE)
    table = table or PricingTable.load()
    price = table.price(model)
    if price is None:
        return Cost(None, UNKNOWN_SOURCE)
    usd = (
        input_tokens * price.input_per_million + output_tokens * price.output_per_million
    ) / 1_000_000
    return Cost(usd, table.label)
