"""Uploaded files: safe names, copied under ``<data_dir>/uploads/<collection>/`` before ingest.

A browser controls the names it sends. ``safe_name`` keeps only the last path
component, drops control characters and anything that is not a plain file name
character, and never returns '.', '..' or a hidden name; ``stage_uploads``
then checks that every resolved target really lies inside the uploads folder.

    staged = stage_uploads(["/tmp/gradio/abc/../../evil.txt"], Path("data/uploads/default"))
    # -> [("evil.txt", Path("data/uploads/default/evil.txt"))]
"""

from __future__ import annotations

import re
import shutil
import unicodedata
from collections.abc import Iterable
from pathlib import Path

MAX_NAME = 120
_UNSAFE = re.compile(r"[^\w.\- ()+,@]+", re.UNICODE)


class UploadError(ValueError):
    """An upload that cannot be staged; the message says why."""


def safe_name(name: str) -> str:
    """A file name that is safe to join to a folder: no separators, no '..', not hidden."""
    base = re.split(r"[\\/]", str(name))[-1]
    base = unicodedata.normalize("NFC", base)
    base = "".join(ch for ch in base if unicodedata.category(ch)[0] != "C")  # control/format chars
    base = _UNSAFE.sub("_", base).strip(" .")
    base = re.sub(r"\.{2,}", ".", base)
    if not base:
        base = "upload"
    if len(base) > MAX_NAME:
        stem, dot, ext = base.rpartition(".")
        base = (stem[: MAX_NAME - len(ext) - 1] + "." + ext) if dot and len(ext) < 16 else base[:MAX_NAME]
    return base


def inside(path: Path, root: Path) -> bool:
    """True when ``path`` resolves to somewhere under ``root`` (symlinks followed)."""
    try:
        path.resolve().relative_to(root.resolve())
    except ValueError:
        return False
    return True


def stage_uploads(sources: Iterable[str | Path], target_dir: Path,
                  names: Iterable[str] | None = None) -> list[tuple[str, Path]]:
    """Copy uploaded temp files into ``target_dir`` under safe names; returns (shown name, staged path).

    ``names``: the names the browser sent, when they differ from the temp files' names.
    Re-uploading a file of the same name replaces it (ingest then sees the new content);
    two uploads with the same name in one batch get ``name (2).ext``.
    """
    target_dir = Path(target_dir)
    target_dir.mkdir(parents=True, exist_ok=True)
    sources = [Path(s) for s in sources]
    names = list(names) if names is not None else [s.name for s in sources]
    taken: set[str] = set()
    out: list[tuple[str, Path]] = []
    for src, raw in zip(sources, names, strict=True):
        name = safe_name(raw)
        stem, dot, ext = name.rpartition(".")
        if not dot:
            stem, ext = name, ""
        n = 2
        while name in taken:
            name = f"{stem} ({n}){'.' + ext if ext else ''}"
            n += 1
        taken.add(name)
        dest = target_dir / name
        if not inside(dest, target_dir) or dest.is_symlink():
            raise UploadError(f"{raw}: refusing to write outside {target_dir}")
        if not src.is_file():
            raise UploadError(f"{raw}: upload is missing or not a file")
        tmp = dest.with_name(f".{name}.part")
        shutil.copyfile(src, tmp)
        tmp.replace(dest)
        out.append((name, dest))
    return out
