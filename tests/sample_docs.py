"""The two small documents the API, follow-up and browser tests index: one answers questions about
a telescope, the other is about something else (what a citation must not point at)."""

from pathlib import Path

ZEPHYR = """# Project Zephyr

The Zephyr telescope was assembled in the town of Quillfield in 2019.
Its primary mirror is 4.2 metres wide and was polished by Marta Ilves.
The telescope observes the sky from the Quillfield ridge every clear night.
"""
GARDEN = """Notes on the community garden.

The community garden grows tomatoes, beans and sunflowers.
Watering happens every Tuesday and Saturday morning.
"""


def write_sample_docs(folder: Path) -> Path:
    """``folder`` made, holding zephyr.md and garden.txt."""
    folder.mkdir()
    (folder / "zephyr.md").write_text(ZEPHYR)
    (folder / "garden.txt").write_text(GARDEN)
    return folder
