"""The sample documents that ship with hyde_lc, with questions about them.

A short guide to how lighthouses work and changed, in English (``en``, 7 pages), and one
on lighthouses and navigation in old China, in Chinese (``zh``, 5 pages): enough text to
try ingestion, retrieval and answering offline (``hyde-lc ingest --sample [en|zh]``).
Each has a question file (JSON Lines: ``question``, ``reference``, ``page``,
``keywords``) for ``hyde-lc evaluate``.

Example:
    >>> from hyde_lc import sample_files
    >>> [path.name for path in sample_files()]
    ['lighthouses.pdf']
    >>> [path.name for path in sample_files("zh")]
    ['lighthouses_zh.pdf']
    >>> sample_questions("zh").name
    'questions_zh.jsonl'

"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

from hyde_lc.errors import InvalidSettingError

SAMPLES: dict[str, tuple[str, str]] = {
    "en": ("lighthouses.pdf", "questions.jsonl"),
    "zh": ("lighthouses_zh.pdf", "questions_zh.jsonl"),
}
"""Language -> (document, question file), in the package's ``sample`` folder."""
SAMPLE_LANGUAGES = tuple(SAMPLES)


def _sample(language: str, index: int) -> Path:
    if language not in SAMPLES:
        raise InvalidSettingError(
            f"no sample in {language!r}: choose one of {', '.join(SAMPLE_LANGUAGES)}"
        )
    return Path(str(resources.files("hyde_lc") / "sample" / SAMPLES[language][index]))


def sample_files(language: str = "en") -> list[Path]:
    """The bundled sample document(s) in ``language`` (``en`` or ``zh``)."""
    return [_sample(language, 0)]


def sample_questions(language: str = "en") -> Path:
    """The question file (JSON Lines) for the sample in ``language``."""
    return _sample(language, 1)
