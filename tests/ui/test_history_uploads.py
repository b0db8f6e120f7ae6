"""The SQLite chat store and upload staging (names that try to escape the data directory)."""

from __future__ import annotations

import pytest

from localrag.app.history import ChatStore, Turn, make_title
from localrag.app.uploads import UploadError, inside, safe_name, stage_uploads
from localrag.grounded.extras import GroundedDraft, GroundedExtras
from localrag.results import AnswerStats, Citation, GenerationStats, RasdStats


def test_a_chat_stored_before_modes_had_extras_reads_back(tmp_path):
    """An older row: mode "rasd" and Grounded's drafts and phase times in shared fields. It reads back
    as the mode's extras, and the old mode name still shows the mode's label."""
    import json

    from localrag.app.history import Turn as StoredTurn
    from localrag.ui.render import mode_label

    # an older record's "consistency" (a score no longer kept) is ignored
    draft = {"answer": "d", "rationale": "r", "citations": [], "draft_logprob": -1.0, "consistency": -2.0,
             "reflection": -0.5, "score": -1.0}
    payload = json.dumps({"drafts": [draft], "stats": {"mode": "grounded", "retrieval": {"query": "q", "k": 10},
                                                       "grounded": {"n_drafts": 1, "draft_s": 0.5}}})
    turn = StoredTurn.from_row(1, "q", "a", "grounded", payload)
    assert isinstance(turn.extras, GroundedExtras) and turn.extras.n_drafts == 1 and turn.extras.draft_s == 0.5
    assert turn.extras.drafts[0].answer == "d" and turn.stats.search.query == "q" and turn.stats.search.k == 10
    assert mode_label("rasd") == "Speedup (RASD)" and mode_label("specrag") == "Grounded (Speculative RAG)"


def test_history_survives_reopen(tmp_path):
    store = ChatStore(tmp_path / "h.sqlite")
    a = store.new_chat("First question about the telescope")
    cite = Citation("x.md", None, 1, 1, "snip", "text", "v1:0", "x.md line 1")
    stats = AnswerStats(mode="speedup", total_s=1.0,
                        generation=GenerationStats(generated_tokens=3, decoder=RasdStats(accepted_per_step=[1, 2])))
    store.add_turn(a, Turn("q1", "a1", "speedup", citations=[cite], stats=stats))
    b = store.new_chat("Second")
    store.add_turn(b, Turn("q2", "a2", "plain"))
    draft = GroundedDraft("d", "r", [cite], -1.0, -0.5, -1.0, subset=(0, 2))
    store.add_turn(a, Turn("q3", "a3", "grounded", extras=GroundedExtras(drafts=[draft], n_drafts=1)))
    store.close()

    again = ChatStore(tmp_path / "h.sqlite")
    chats = again.list_chats()
    assert [c.id for c in chats] == [a, b]  # most recently updated first
    assert chats[0].title == "First question about the telescope" and chats[0].n_turns == 2
    turns = again.turns(a)
    assert [t.question for t in turns] == ["q1", "q3"]
    assert turns[0].citations == [cite] and turns[0].stats == stats  # read back into the same types
    assert turns[1].extras == GroundedExtras(drafts=[draft], n_drafts=1)  # read back as the mode's own type
    assert turns[1].mode == "grounded" and turns[1].stats is None
    assert again.pop_last_turn(a).question == "q3"
    assert [t.question for t in again.turns(a)] == ["q1"]
    again.delete_chat(b)
    assert not again.exists(b) and again.turns(b) == []
    again.close()


def test_titles_are_one_short_line():
    assert make_title("  what\n is   this?  ") == "what is this?"
    assert len(make_title("x" * 500)) == 60
    assert make_title("   ") == "New chat"


@pytest.mark.parametrize("name, expected", [
    ("../../evil.txt", "evil.txt"),
    ("..\\..\\evil.txt", "evil.txt"),
    ("/etc/passwd", "passwd"),
    ("..", "upload"),
    ("...", "upload"),
    (".bashrc", "bashrc"),
    ("a\x00b\n.md", "ab.md"),
    ("report 2024 (final).pdf", "report 2024 (final).pdf"),
    ("notes..md", "notes.md"),
    ("résumé.docx", "résumé.docx"),
    ("a/b/../c.md", "c.md"),
])
def test_safe_name(name, expected):
    assert safe_name(name) == expected


def test_safe_name_is_bounded_and_keeps_extension():
    name = safe_name("x" * 400 + ".pdf")
    assert len(name) <= 120 and name.endswith(".pdf")


def test_stage_uploads_cannot_escape(tmp_path):
    src = tmp_path / "tmpupload"
    src.mkdir()
    (src / "a.txt").write_text("hello")
    target = tmp_path / "data" / "uploads" / "default"
    staged = stage_uploads([src / "a.txt", src / "a.txt", src / "a.txt"], target,
                           names=["../../evil.txt", "../evil.txt", "/abs/evil.txt"])
    assert [n for n, _ in staged] == ["evil.txt", "evil (2).txt", "evil (3).txt"]
    for _, path in staged:
        assert inside(path, target) and path.read_text() == "hello"
    assert not (tmp_path / "evil.txt").exists() and not (tmp_path / "data" / "evil.txt").exists()
    assert sorted(p.name for p in target.iterdir()) == ["evil (2).txt", "evil (3).txt", "evil.txt"]


def test_stage_refuses_symlink_target_and_missing_source(tmp_path):
    target = tmp_path / "up"
    target.mkdir()
    outside = tmp_path / "outside.txt"
    outside.write_text("keep me")
    (target / "link.txt").symlink_to(outside)
    src = tmp_path / "src.txt"
    src.write_text("new")
    with pytest.raises(UploadError, match="outside"):
        stage_uploads([src], target, names=["link.txt"])
    assert outside.read_text() == "keep me"
    with pytest.raises(UploadError, match="missing"):
        stage_uploads([tmp_path / "nope.txt"], target)
    assert [p.name for p in target.iterdir()] == ["link.txt"]  # neither refusal wrote a file
