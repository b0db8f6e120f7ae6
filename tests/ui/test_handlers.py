"""Chat, document and settings handlers, driven without Gradio over fake models and index."""

from __future__ import annotations

import re
import threading
import time
from pathlib import Path

from localrag.app.history import Turn
from localrag.grounded.extras import GroundedDraft, GroundedExtras
from localrag.modes.base import WarmUpStopped
from localrag.results import AnswerStats, GenerationStats, RasdStats
from localrag.ui.documents import DocsController
from localrag.ui.handlers import (
    WARMING_UP,
    ChatController,
    SettingsController,
    chat_label,
    history_choices,
)
from localrag.ui.render import accepted_per_step, chat_messages, stats_line
from localrag.ui.settings import Settings
from tests.ui.conftest import FAKE_MODES, ZEPHYR_HIT, FakeBackend, FakeEngine


def run(gen):
    views = list(gen)
    assert views, "a handler must always yield at least once"
    return views


def texts(messages):
    return [m["content"] for m in messages]


def words(content: str) -> str:
    """A message as its reader sees it: the HTML tags dropped."""
    return re.sub(r"<[^>]+>", "", content)


def titles(messages):
    return [m.get("metadata", {}).get("title", "") for m in messages]


def marker(n: int, turn: int = 0) -> str:
    """A computed citation marker: [n], a link that opens source n of the chat's turn ``turn``."""
    return f'<sup><a href="#" class="lr-open lr-ref-s-{turn}-{n}" title="open the source">[{n}]</a></sup>'


def test_respond_streams_then_saves_with_citation_and_stats(make_services):
    s = make_services()
    s.index("default").docs["/x/zephyr.md"] = 3
    views = run(ChatController(s).respond(None, "Who polished the mirror?", Settings()))
    # streamed: the answer grows piece by piece before the final view
    answers = [v.messages[1]["content"] for v in views]
    assert answers[0] == "…" and any(a.startswith("Marta") and a != answers[-1] for a in answers[:-1])
    final = views[-1]
    assert not final.busy and final.chat_id is not None
    assert final.messages[0] == {"role": "user", "content": "Who polished the mirror?"}
    assert final.messages[1]["content"] == "Marta Ilves polished it." + marker(1)  # its computed citation
    assert "📚 Sources (1)" in titles(final.messages)
    child = next(m for m in final.messages if m.get("metadata", {}).get("parent_id"))
    assert "zephyr.md lines 3-4" in child["metadata"]["title"] and "Marta Ilves" in child["content"]
    assert "🔎 Also searched (1) · not cited" in titles(final.messages)  # garden.txt supports nothing
    assert "Plain · writing: 4 tokens in 0.1 s, 42.0 tok/s · 1 token/step · 1.00× (plain baseline)" in final.messages[-1]["content"]
    assert [t.answer for t in s.history.turns(final.chat_id)] == ["Marta Ilves polished it."]


def test_history_survives_restart(make_services):
    first = make_services()
    first.index("default").docs["/x/zephyr.md"] = 3
    view = run(ChatController(first).respond(None, "Who polished the mirror?", Settings()))[-1]
    first.history.close()
    second = make_services()  # same data dir: a restarted app
    [(label, cid)] = history_choices(second)
    assert cid == view.chat_id
    assert re.fullmatch(r"Who polished the mirror\? · Plain · \d\d:\d\d", label), label  # title, mode, time
    info = second.history.list_chats()[0]
    assert chat_label(info, now=info.updated + 3 * 86400) == time.strftime(
        "Who polished the mirror? · Plain · %d %b %H:%M", time.localtime(info.updated))  # older: the date too
    loaded = ChatController(second).load(view.chat_id)
    assert texts(loaded.messages)[:2] == ["Who polished the mirror?", "Marta Ilves polished it." + marker(1)]
    assert loaded.messages == view.messages  # a stored chat re-renders the same way


def test_follow_up_sends_history_and_new_chat_is_separate(make_services, fake_answering):
    s = make_services()
    chat = ChatController(s)
    cid = run(chat.respond(None, "first?", Settings()))[-1].chat_id
    run(chat.respond(cid, "second?", Settings(k=7, max_tokens=64, temperature=0.5)))
    request = fake_answering.last_request
    assert request.question == "second?" and request.options.k == 7 and request.collection == "default"
    assert request.gen.max_tokens == 64 and request.gen.temperature == 0.5
    assert request.history == ({"role": "user", "content": "first?"},
                               {"role": "assistant", "content": "Marta Ilves polished it."})
    other = run(chat.respond(None, "unrelated", Settings()))[-1].chat_id
    assert other != cid and len(s.history.list_chats()) == 2


def test_unavailable_mode_is_explained_not_raised(make_services):
    """A mode says itself why it cannot run: Grounded drafts in batches, which only llama.cpp does."""
    s = make_services(engine=FakeEngine(backend=object()))
    final = run(ChatController(s).respond(None, "q", Settings(mode="grounded")))[-1]
    assert "Grounded (Speculative RAG) is unavailable" in final.messages[1]["content"]
    assert "llama.cpp backend" in final.messages[1]["content"]
    note = SettingsController(s).mode_note("grounded")
    assert "Grounded (Speculative RAG) is unavailable" in note and "✅ **Plain**" in note
    assert "✅ **Speedup (RASD)**" in note
    # the chosen mode says what it is for and what it costs: Grounded, that it refuses and is slower
    assert "else refuses" in note and "Slower than Plain" in note
    assert "Plain's answer, faster" in SettingsController(s).mode_note("speedup")


def test_no_model_loaded_is_a_message(make_services):
    s = make_services(engine=None, engine_error="x.gguf: not a GGUF file")
    final = run(ChatController(s).respond(None, "q", Settings()))[-1]
    assert "not a GGUF file" in final.messages[1]["content"] and not final.busy
    assert "No model loaded" in s.model_status()


def test_the_model_line_says_when_answers_are_not_bit_exact(make_services):
    s = make_services(engine=FakeEngine())
    assert s.model_status() == "Model: **fake-model**"
    batch_dependent = FakeBackend()
    batch_dependent.deterministic = False  # GPU layers, llama.cpp's default kernels, transformers
    s = make_services(engine=FakeEngine(backend=batch_dependent))
    assert "not bit-exact" in s.model_status() and "near-ties" in s.model_status()


def test_answer_errors_become_messages(make_services, fake_answering):
    fake_answering.fail = RuntimeError("llama_decode failed")
    s = make_services()
    final = run(ChatController(s).respond(None, "q", Settings()))[-1]
    assert "RuntimeError: llama_decode failed" in final.messages[1]["content"]
    assert s.history.turns(final.chat_id)[0].error  # saved, visible after restart too


def test_empty_collection_is_flagged(make_services):
    s = make_services()
    final = run(ChatController(s).respond(None, "q", Settings(collection="empty")))[-1]
    assert "has no documents yet" in final.messages[1]["content"]


def test_empty_question_and_bad_chat_id(make_services):
    s = make_services()
    views = run(ChatController(s).respond(12345, "   ", Settings()))
    assert views[-1].note and views[-1].messages == [] and s.history.list_chats() == []


def test_stop_keeps_partial_answer_with_sources_and_stats(make_services, fake_answering):
    s = make_services()
    chat = ChatController(s)
    fake_answering.on_piece = lambda i: chat.stop("tab-1") if i == 1 else None
    final = run(chat.respond(None, "q", Settings(), owner="tab-1"))[-1]
    assert final.messages[1]["content"].startswith("Marta Ilves") and "Stopped." in final.messages[1]["content"]
    assert "polished" not in final.messages[1]["content"]
    assert "📚 Sources (1)" in titles(final.messages)  # what it had: its sources and its stats line
    assert final.messages[-1]["content"].startswith("<small>⚡ Plain")
    stored = s.history.turns(final.chat_id)[0]
    assert stored.answer == "Marta Ilves" and stored.citations and stored.stats is not None
    fake_answering.on_piece = None
    again = run(chat.respond(final.chat_id, "q2", Settings(), owner="tab-1"))[-1]  # a later answer is not stopped
    assert "⚡" in again.messages[-1]["content"] and "Stopped." not in again.messages[-4]["content"]


def test_stop_in_one_tab_leaves_the_other_answering_and_the_waiting_tab_shows_its_place(
        make_services, fake_answering):
    """Tab A answers (held on its second piece); tab B waits and shows its place in line; Stop in
    B stops B only; A then finishes its whole answer, with no "Stopped."."""
    s = make_services()
    chat = ChatController(s)
    release_a = threading.Event()
    a_writing = threading.Event()

    def hold_a(i):  # on the generation thread, where every answer is computed; B never gets to write
        if i == 1 and not a_writing.is_set():
            a_writing.set()
            assert release_a.wait(10)

    fake_answering.on_piece = hold_a
    views: dict[str, list] = {"a": [], "b": []}

    def ask(tab):  # (a question the fake answer answers, so that the evidence check passes it)
        for v in chat.respond(None, f"Who polished the mirror of {tab}?", Settings(), owner=f"tab-{tab}"):
            views[tab].append(v)

    ta = threading.Thread(target=ask, args=("a",), name="tab-a")
    ta.start()
    assert a_writing.wait(10)
    tb = threading.Thread(target=ask, args=("b",), name="tab-b")
    tb.start()
    deadline = time.time() + 10
    while not any("waiting: 2nd in line" in v.messages[1]["content"] for v in views["b"]):
        assert time.time() < deadline, [v.messages[1]["content"] for v in views["b"]]
        time.sleep(0.02)
    chat.stop("tab-b")
    tb.join(10)
    b = views["b"][-1].messages[1]["content"]
    assert "Stopped before it started." in b and not views["b"][-1].busy
    assert ta.is_alive()  # A is still answering
    release_a.set()
    ta.join(10)
    a = views["a"][-1].messages
    assert words(a[1]["content"]) == "Marta Ilves polished it.[1]" and "Stopped" not in a[1]["content"]
    assert a[-1]["content"].startswith("<small>⚡ Plain")


def test_the_wait_counts_in_the_stats(make_services, fake_answering):
    s = make_services()
    chat = ChatController(s)
    ticket = s.queue.submit("someone else")
    assert s.queue.wait_turn(ticket, timeout=0)
    threading.Timer(0.3, s.queue.release, args=(ticket,)).start()
    final = run(chat.respond(None, "q", Settings(), owner="tab-1"))[-1]
    stats = s.history.turns(final.chat_id)[0].stats
    assert stats.waited_s >= 0.25
    assert f"{stats.waited_s:.1f} s waiting for the model" in final.messages[-1]["content"]


def test_a_full_queue_refuses_with_a_message(make_services):
    s = make_services()
    running = s.queue.submit("x")
    s.queue.wait_turn(running, timeout=0)
    for i in range(s.config.max_waiting):
        s.queue.submit(f"w{i}")
    final = run(ChatController(s).respond(None, "q", Settings(), owner="tab-1"))[-1]
    assert "requests are already waiting" in final.messages[1]["content"] and not final.busy


def test_regenerate_replaces_last_turn(make_services, fake_answering):
    s = make_services()
    chat = ChatController(s)
    cid = run(chat.respond(None, "q", Settings()))[-1].chat_id
    fake_answering.pieces = ["Another ", "answer."]
    final = run(chat.regenerate(cid, Settings()))[-1]
    assert [t.answer for t in s.history.turns(cid)] == ["Another answer."]
    assert words(final.messages[1]["content"]).startswith("Another answer.")
    assert run(chat.regenerate(None, Settings()))[-1].note == "Nothing to regenerate."


UNSUPPORTED = ["Marta Ilves polished it. ", "The primary mirror is 9 metres wide."]


def test_supported_span_is_highlighted_and_an_unsupported_sentence_is_marked(make_services, fake_answering):
    """Computed citations: [1] after the supported sentence, its span in <mark> inside the chunk; the
    sentence with a number the documents lack is underlined with dots, its tooltip says why."""
    fake_answering.pieces = UNSUPPORTED
    s = make_services()
    final = run(ChatController(s).respond(None, "Who polished the mirror?", Settings()))[-1]
    body = final.messages[1]["content"]
    assert body.startswith("Marta Ilves polished it." + marker(1) + ' <span class="lr-unsupported"')
    assert 'title="not found in your documents (number &quot;9&quot; not in the sources)"' in body
    assert "underline dotted" in body and ">The primary mirror is 9 metres wide.</span>" in body
    panel = next(m["content"] for m in final.messages if m.get("metadata", {}).get("id") == "sources-0-1")
    link, chunk = panel.split("\n\n", 1)  # a link that opens the source, then the chunk
    assert link == ('<a href="#" class="lr-open lr-ref-s-0-1" title="open zephyr.md lines 3-4">📄 Open lines 3-4</a>')
    assert "<mark>" in chunk and re.sub(r"</?mark>", "", chunk) == ZEPHYR_HIT.text
    assert "Marta" in "".join(re.findall(r"<mark>(.*?)</mark>", chunk))


def test_unsupported_answer_warns_or_refuses_as_set(make_services, fake_answering):
    """Nothing of the answer is in the documents: Plain warns by default (the answer shown, marked,
    with what was searched); set to refuse, it says the documents do not support an answer and
    keeps the answer collapsed, labelled; Grounded refuses by default."""
    fake_answering.pieces = ["Take 400 mg of ibuprofen every 4 hours."]
    s = make_services()
    chat = ChatController(s)
    warned = run(chat.respond(None, "What is the ibuprofen dosage?", Settings()))[-1]
    body = warned.messages[1]["content"]
    assert 'class="lr-unsupported"' in body and "⚠️ *Your documents do not support this answer" in body
    assert 'What was searched: searched "q" in collection "default"' in body
    assert "📚 Sources" not in "".join(titles(warned.messages))  # nothing supports it: no citation
    assert "🔎 Also searched (2) · not cited" in titles(warned.messages)
    for settings in (Settings(on_unsupported="refuse"), Settings(mode="grounded")):
        refused = run(chat.respond(None, "What is the ibuprofen dosage?", settings))[-1]
        body = refused.messages[1]["content"]
        assert body.startswith("🚫 **Your documents do not support an answer to this question")
        assert "ibuprofen" not in body and "What was searched:" in body
        panel = next(m for m in refused.messages if "Unsupported answer" in m.get("metadata", {}).get("title", ""))
        assert panel["metadata"]["title"] == "⚠️ Unsupported answer (not found in your documents)"
        assert "Take 400 mg of ibuprofen every 4 hours." in panel["content"]
        turn = s.history.turns(refused.chat_id)[0]
        assert turn.refusal and turn.answer == "Take 400 mg of ibuprofen every 4 hours." and turn.supported is False
        assert chat.load(refused.chat_id).messages == refused.messages  # stored, it re-renders the same
    follow = run(chat.respond(refused.chat_id, "and for children?", Settings()))[-1]
    assert follow.chat_id == refused.chat_id
    history = fake_answering.last_request.history  # the model sees the refusal, not the refused text
    assert history[1]["content"].startswith("Your documents do not support an answer") and "400 mg" not in history[1]["content"]


def test_model_and_document_html_is_escaped(make_services, fake_answering):
    fake_answering.pieces = ["<img src=x onerror=alert(1)> Marta Ilves polished it."]
    s = make_services()
    final = run(ChatController(s).respond(None, "Who polished the mirror?", Settings()))[-1]
    assert "<img" not in "".join(texts(final.messages)) and "&lt;img src=x onerror=alert(1)&gt;" in final.messages[1]["content"]


def test_speedup_mode_stats_and_plot(make_services):
    s = make_services()
    final = run(ChatController(s).respond(None, "q", Settings(mode="speedup")))[-1]
    line = final.messages[-1]["content"]
    assert line.startswith("<small>⚡ Speedup (RASD)") and "2.50 accepted tokens/step" in line and "1.80× vs plain" in line
    assert final.steps == [1, 3, 4, 2]


def test_grounded_mode_shows_drafts_with_scores(make_services):
    """The mode's extras (Grounded's drafts) are its own panel, rendered without the UI knowing the mode."""
    s = make_services()
    final = run(ChatController(s).respond(None, "q", Settings(mode="grounded")))[-1]
    drafts = next(m for m in final.messages if m.get("metadata", {}).get("title", "").startswith("🧪 Drafts (2)"))
    assert "chosen #1" in drafts["metadata"]["title"]
    content = drafts["content"]
    assert "|" not in content  # no table: its seven headers were squeezed into the chat bubble
    assert content.startswith("**#1 ✅ Marta Ilves** · score -1.100  \n"
                              "drafter · log p -3.200 · reflection -0.200 · evidence ✓ · from zephyr.md lines 3-4")
    assert "> *The text says Marta Ilves polished it.*" in content and "**#2 Quillfield** · score -3.400" in content
    assert drafts["metadata"]["status"] == "done"  # collapsed: shown on demand


def test_the_pending_grounded_answer_shows_its_progress(make_services):
    """Grounded's progress (searching, drafting k of m done, verifying) shows in the pending answer,
    in order, before its text; the finished answer replaces it."""
    s = make_services()
    views = run(ChatController(s).respond(None, "q", Settings(mode="grounded")))
    shown = [v.messages[1]["content"] for v in views]
    progress = [c for c in shown if c.startswith("⏳")]
    assert progress == ["⏳ Searching your documents…", "⏳ Drafting answers: 0 of 2 done…",
                        "⏳ Drafting answers: 1 of 2 done…", "⏳ Drafting answers: 2 of 2 done…",
                        "⏳ Verifying the drafts…"]
    assert shown.index(progress[-1]) < min(i for i, c in enumerate(shown) if "Marta" in c)
    assert words(shown[-1]) == "Marta Ilves polished it.[1]" and not views[-1].busy
    assert all(v.busy for v in views if v.messages[1]["content"].startswith("⏳"))


def test_a_dropped_draft_is_marked_and_never_the_chosen_one():
    """A draft whose answer did not end within max_tokens shows what it wrote, cut and marked, and
    is never marked as chosen, even with the best score."""
    cut = GroundedDraft("Marta Ilves polished the", "", [], -1.0, -0.1, -0.5,
                        dropped="its answer did not end within 8 tokens")
    whole = GroundedDraft("Quillfield", "", [], -2.9, -2.3, -3.4)

    def drafts_panel(drafts):
        messages = chat_messages([Turn(question="q", answer="", mode="grounded", extras=GroundedExtras(drafts=drafts))])
        return next(m for m in messages if m.get("metadata", {}).get("title", "").startswith("🧪 Drafts"))

    panel = drafts_panel([cut, whole])
    assert panel["metadata"]["title"] == "🧪 Drafts (2) · chosen #2, score -3.400"
    assert panel["content"].startswith("**#1 Marta Ilves polished the… ✂ dropped: its answer did not end within "
                                       "8 tokens** · score -0.500")
    assert "**#2 ✅ Quillfield**" in panel["content"]
    assert drafts_panel([cut])["metadata"]["title"] == "🧪 Drafts (1) · none chosen"


def test_what_a_mode_could_not_use_is_shown(make_services, fake_answering):
    """A mode's notes (Speedup: a draft model it could not use, and that it speculated from retrieval
    alone) are shown with the answer; the real note is tested with real models in tests/grounded."""
    fake_answering.notes = ["draft model gemma3-270m is unusable: different vocabularies. Speculating from "
                            "retrieval only."]
    s = make_services()
    final = run(ChatController(s).respond(None, "q", Settings(mode="speedup", draft_model="gemma3-270m")))[-1]
    assert "draft model gemma3-270m is unusable" in final.messages[1]["content"]
    assert "⚡ Speedup" in final.messages[-1]["content"]  # still answered, retrieval-only
    assert fake_answering.last_request.options.draft == "gemma3-270m"  # the setting reached the mode's options


def test_draft_vocabulary_check_with_real_registry(make_services):
    s = make_services()  # the target: the default model (Qwen2.5-Coder-1.5B, by the app's config)
    note = SettingsController(s).draft_note("gemma3-270m")
    assert "unusable" in note and "different vocabularies" in note
    assert "shares the target's vocabulary" in SettingsController(s).draft_note("qwen2.5-coder-0.5b-instruct")
    assert SettingsController(s).draft_note("qwen2.5-coder-1.5b-instruct").startswith("ℹ️")  # the target itself
    usable, _ = SettingsController(s).models()
    assert {"smollm2-135m-instruct", "gemma3-270m"} <= set(usable)


def test_model_swap_failure_keeps_current(make_services, tmp_path):
    s = make_services()
    old = s.engine
    bad = tmp_path / "broken.gguf"
    bad.write_bytes(b"NOPE" * 10)
    msg = SettingsController(s).load_model(str(bad), 0)
    assert msg.startswith("❌") and "not a GGUF file" in msg and s.engine is old


def test_ingest_progress_results_and_sanitized_names(make_services, tmp_path):
    s = make_services()
    up = tmp_path / "browser"
    up.mkdir()
    for name in ("a.md", "b.txt", "corrupt.pdf"):
        (up / name).write_text("x")
    docs = DocsController(s)
    views = run(docs.ingest([up / "a.md", up / "b.txt", up / "corrupt.pdf"], "default",
                            names=["../../evil.md", "b.txt", "corrupt.pdf"]))
    assert any(v.summary.startswith("Ingesting: ") and " files · " in v.summary for v in views[:-1])
    final = views[-1]
    assert final.done and "1 failed" in final.summary and "2 added" in final.summary
    rows = {r[0]: r for r in final.rows}
    assert rows["evil.md"][1] == "added" and rows["b.txt"][2] == 3
    assert rows["corrupt.pdf"][1] == "failed" and "bad header" in rows["corrupt.pdf"][3]
    uploads = (tmp_path / "data" / "uploads" / "default").resolve()
    for p in make_services.indexes["default"].ingested:
        assert Path(p).resolve().parent == uploads
    assert not (tmp_path / "evil.md").exists()
    # the document list shows names within the collection, with chunk counts
    listed = docs.documents("default")
    assert ["b.txt", 3, "indexed"] in listed and ["evil.md", 3, "indexed"] in listed
    # same file again: skipped
    again = run(docs.ingest([up / "b.txt"], "default"))[-1]
    assert "1 skipped" in again.summary


def test_uploaded_temp_copies_are_removed_once_staged(make_services, tmp_path):
    """Gradio's copies under the data dir's temp folder go once ingested; the staged copy stays
    (the index cites it), and a file outside the temp folder is never touched."""
    s = make_services()
    temp = s.config.upload_temp_dir
    (temp / "3f2a9c").mkdir(parents=True)
    (temp / "77b1e0" / "sub").mkdir(parents=True)
    a, b = temp / "3f2a9c" / "a.md", temp / "77b1e0" / "sub" / "b.txt"
    a.write_text("alpha")
    b.write_text("beta")
    (temp / "77b1e0" / "other.txt").write_text("someone else's upload")
    mine = tmp_path / "mine.txt"
    mine.write_text("a user's own file")
    final = run(DocsController(s).ingest([str(a), str(b), str(mine)], "default"))[-1]
    assert "3 added" in final.summary
    assert not a.exists() and not (temp / "3f2a9c").exists()
    assert not b.exists() and not (temp / "77b1e0" / "sub").exists() and (temp / "77b1e0" / "other.txt").exists()
    assert mine.exists() and temp.exists()
    staged = sorted(p.name for p in (s.uploads_dir / "default").iterdir())
    assert staged == ["a.md", "b.txt", "mine.txt"]


def test_ingest_errors_are_messages(make_services, tmp_path):
    docs = DocsController(make_services())
    assert run(docs.ingest([], "default"))[-1].summary == "Drop files or a folder first."
    assert "letters, digits" in run(docs.ingest([tmp_path], "bad name!"))[-1].summary
    assert "missing or not a file" in run(docs.ingest([tmp_path / "gone.txt"], "default"))[-1].summary


def test_remove_document_deletes_staged_copy(make_services, tmp_path):
    s = make_services()
    docs = DocsController(s)
    src = tmp_path / "a.md"
    src.write_text("x")
    run(docs.ingest([src], "work"))
    staged = (tmp_path / "data" / "uploads" / "work" / "a.md").resolve()
    assert staged.exists() and docs.document_choices("work") == [("a.md", str(staged))]
    assert docs.remove("work", str(staged)) == "Removed a.md."
    assert not staged.exists() and docs.documents("work") == [] and src.exists()
    assert docs.remove("work", "") == "Pick a document to remove."


def test_stats_line_variants():
    assert stats_line("plain", AnswerStats(total_s=1.25)) == "⚡ Plain · 1.2 s in all"
    decoder = RasdStats(mean_accepted=3.0, speedup_vs_plain=2.0, accepted_per_step=[1, 2])
    stats = AnswerStats(total_s=2.0, generation=GenerationStats(generated_tokens=20, decode_seconds=2.0,
                                                                decoder=decoder))
    line = stats_line("rasd", stats)
    assert line == ("⚡ Speedup (RASD) · writing: 20 tokens in 2.0 s, 10.0 tok/s · 3.00 accepted tokens/step · "
                    "2.00× vs plain writing (est. from measured step times) · 2.0 s in all")
    assert stats_line("specrag", stats).startswith("⚡ Grounded (Speculative RAG) · ")  # an older chat's mode name
    decoder.draft_idle = True  # a draft model that sat the answer out says so, and what the speedup is then
    assert (" · 2.00× vs plain writing (est. from measured step times) · draft model idle (it would not repay its "
            "time here): retrieval alone speculated · ") in stats_line("rasd", stats)
    assert accepted_per_step(stats) == [1, 2] and accepted_per_step(None) == []


def test_stats_line_gives_the_reading_and_the_writing_apart():
    """ "2.7 tok/s · 34.9 s" hid that 30 s went to reading the documents: the prompt's reading and the
    writing rate (over the writing alone) are apart, a long set-up is named, and the whole time last."""
    gen = GenerationStats(prompt_tokens=2400, reused_prompt_tokens=100, generated_tokens=12,
                          prefill_seconds=30.2, decode_seconds=4.4)
    line = stats_line("plain", AnswerStats(total_s=34.9, generation=gen))
    assert line == ("⚡ Plain · prompt read: 2,300 tokens in 30.2 s (100 more kept from before) · writing: 12 tokens "
                    "in 4.4 s, 2.7 tok/s · 1 token/step · 1.00× (plain baseline) · 34.9 s in all")
    timed = AnswerStats(total_s=61.0, setup_s=56.5, generation=GenerationStats(
        prompt_tokens=50, generated_tokens=10, prefill_seconds=0.5, decode_seconds=4.0,
        decoder=RasdStats(mean_accepted=1.5, speedup_vs_plain=1.36)))
    line = stats_line("speedup", timed)
    assert "· set-up: 56.5 s ·" in line and line.endswith("· 61.0 s in all") and "1.36× vs plain writing" in line


def test_chunk_text_is_shown_literally():
    from localrag.ui.render import literal_markdown

    out = literal_markdown("# Title\n- item\n12. step\n<script>x</script>")
    assert out.splitlines() == ["\\# Title  ", "\\- item  ", "12\\. step  ", "&lt;script&gt;x&lt;/script&gt;"]


def test_what_the_modes_keep_outlives_one_answer_until_a_model_swap(make_services):
    """One Answerer per loaded model: what the modes keep there (Speedup's decoder and what it learned)
    carries from answer to answer, and a model swap starts afresh."""
    s = make_services(model_loader=lambda cfg: FakeEngine())
    first = s.answerer
    kept = first.runtime(("speedup", None), object)
    run(ChatController(s).respond(None, "q", Settings(mode="speedup")))
    assert s.answerer is first and first.runtime(("speedup", None), object) is kept
    assert "Loaded" in s.swap_model("smollm2-135m-instruct", 0)
    assert s.answerer is not first and s.answerer.runtime(("speedup", None), object) is not kept


# ---------------------------------------------------------------- what new users stumbled on


def test_a_stopped_ingest_keeps_what_it_did_lists_what_it_did_not_and_continue_does_the_rest(make_services, tmp_path):
    """Stop sets the running ingest's cancel event (that session's only); the files done stay, the
    others are listed as not done, and Continue ingests exactly those."""
    s = make_services()
    index = s.index("default")
    docs = DocsController(s)
    up = tmp_path / "browser"
    up.mkdir()
    names = [f"n{i}.md" for i in range(4)]
    for name in names:
        (up / name).write_text(name)
    assert docs.stop_ingest("tab-1") == "No ingest is running."
    index.on_file = lambda i: (docs.stop_ingest("tab-2"), docs.stop_ingest("tab-1")) if i == 3 else None
    views = run(docs.ingest([up / n for n in names], "default", owner="tab-1"))
    final = views[-1]
    assert final.done and final.resumable and final.summary.startswith("⏹ Stopped: 2 added")
    assert "2 not done (▶ Continue indexes them)" in final.summary
    status = {r[0]: r[1] for r in final.rows}
    assert status == {"n0.md": "added", "n1.md": "added", "n2.md": "not done", "n3.md": "not done"}
    listed = {r[0] for r in docs.documents("default")}
    assert {"n0.md", "n1.md"} <= listed and not {"n2.md", "n3.md"} & listed  # what finished is kept
    assert not any(v.resumable for v in views[:-1])
    index.on_file = None
    assert run(docs.resume("tab-2"))[-1].summary.startswith("Nothing to continue")  # another session's
    again = run(docs.resume("tab-1"))[-1]
    assert again.done and not again.resumable and "2 added" in again.summary
    assert {r[0]: r[1] for r in again.rows} == {"n2.md": "added", "n3.md": "added"}
    assert index.ingested[-2:] == [str((s.uploads_dir / "default" / n).resolve()) for n in ("n2.md", "n3.md")]
    assert {"n2.md", "n3.md"} <= {r[0] for r in docs.documents("default")}
    assert run(docs.resume("tab-1"))[-1].summary.startswith("Nothing to continue")


def test_failed_files_are_listed_apart_from_the_documents(make_services, tmp_path):
    s = make_services()
    docs = DocsController(s)
    (tmp_path / "ok.md").write_text("x")
    (tmp_path / "corrupt.pdf").write_text("x")
    run(docs.ingest([tmp_path / "ok.md", tmp_path / "corrupt.pdf"], "work"))
    assert docs.documents("work") == [["ok.md", 3, "indexed"]]
    assert docs.failed("work") == [["corrupt.pdf", "not a PDF (bad header)"]]


def test_the_empty_chat_says_what_to_do_until_the_collection_has_documents(make_services, tmp_path):
    s = make_services()
    docs = DocsController(s)
    assert docs.placeholder("work") == "Drop documents on the right, then ask."
    (tmp_path / "a.md").write_text("x")
    (tmp_path / "corrupt.pdf").write_text("x")
    run(docs.ingest([tmp_path / "corrupt.pdf"], "work"))
    assert docs.placeholder("work") == "Drop documents on the right, then ask."  # a failed file is no document
    run(docs.ingest([tmp_path / "a.md"], "work"))
    assert docs.placeholder("work") == "Ask about your 1 document in “work”."
    assert docs.placeholder("default") == "Ask about your 1 document in “default”."


def test_a_model_given_by_path_is_shown_with_its_file_size_and_architecture(make_services, tmp_path):
    from localrag.app.config import AppConfig
    from localrag.app.services import Services
    from localrag.config import ModelConfig
    from localrag.models import SMOLLM2_FILE, resolve

    gguf = tmp_path / "models" / "big.gguf"
    gguf.parent.mkdir()
    gguf.symlink_to(resolve("smollm2-135m-instruct").path)  # any GGUF, by a path of its own
    s = make_services()
    s = Services(AppConfig(data_dir=s.config.data_dir, model=ModelConfig(model=str(gguf))), engine=FakeEngine())
    conf = SettingsController(s)
    status = conf.model_status()
    line, plain = status.split("  \n")
    assert line == "Model: **fake-model**" and plain == "_A model of your own: its file and size are under ⚙️ Mode & model._"
    assert str(tmp_path) not in status  # never this machine's path in the header
    about = conf.model_details()  # the picker's details
    assert about.startswith("📦 `big.gguf` · ") and " · llama · " in about and f"`{gguf}`" in about
    size = re.search(r"· ([\d.]+) MB ·", about)
    assert size and abs(float(size.group(1)) - gguf.stat().st_size / 1e6) < 1, about
    usable, _ = conf.models()
    assert conf.model_choices(usable)[-1] == str(gguf) and str(gguf) not in usable  # the picker shows it
    assert SMOLLM2_FILE not in status
    s.history.close()


def test_the_header_names_the_model_and_one_plain_line_the_figures_are_in_the_picker(make_services):
    """The header was benchmark jargon ("SQuAD, 200 questions ... llama-bench ... bench ttft") and the
    model file's path: now the name and one plain line; the figures are the picker's details."""
    from localrag.app.config import AppConfig
    from localrag.app.services import Services
    from localrag.config import ModelConfig
    from localrag.models import GOOD_FOR, IN_A_LINE

    s = make_services()
    s = Services(AppConfig(data_dir=s.config.data_dir, model=ModelConfig(model="smollm2-135m-instruct")),
                 engine=FakeEngine())
    conf = SettingsController(s)
    status = conf.model_status()
    assert status == f"Model: **fake-model**  \n_{IN_A_LINE['smollm2-135m-instruct']}_"
    for jargon in ("SQuAD", "llama-bench", "ttft", "tokens/s", ".gguf", "/"):
        assert jargon not in status, jargon
    details = conf.model_details()
    assert GOOD_FOR["smollm2-135m-instruct"] in details and "SQuAD" in details and ".gguf" in details
    s.history.close()


def test_a_registry_model_is_described_too_and_a_missing_file_says_nothing(make_services):
    from localrag.models import GOOD_FOR
    from localrag.ui.handlers import describe_model

    about = describe_model("smollm2-135m-instruct")
    assert about.startswith("📦 `") and ".gguf` · " in about and "llama" in about
    assert about.endswith(f"Good for: {GOOD_FOR['smollm2-135m-instruct']}")  # what the picker says it is for
    assert describe_model("/no/such/model.gguf") == "" and describe_model("") == ""


def test_a_one_step_answer_draws_no_chart():
    from localrag.ui.render import plotted_steps

    assert plotted_steps([1]) == [] and plotted_steps([]) == []
    assert plotted_steps([1, 3]) == [1, 3]


def test_a_long_question_is_shortened_in_what_was_searched(make_services, fake_answering):
    question = "Which dose is safe? " + "x" * 10_000
    fake_answering.pieces = ["Take 400 mg of ibuprofen every 4 hours."]
    fake_answering.searched = f'searched "{question}" in collection "default"'
    final = run(ChatController(make_services()).respond(None, question, Settings()))[-1]
    body = final.messages[1]["content"]
    line = next(ln for ln in body.splitlines() if "What was searched" in ln)
    assert len(line) < 300 and 'searched "Which dose is safe? xxx' in line and "characters] …" in line, line
    assert line.rstrip().endswith('in collection "default"')
    assert final.messages[0]["content"] == question  # the question itself is shown as asked


def test_a_grounded_answer_is_shown_once_and_its_rationale_only_under_drafts():
    from localrag.evidence import EvidenceAligner
    from tests.ui.conftest import citation

    best = GroundedDraft("Marta Ilves polished it.", "Its primary mirror was polished by Marta Ilves.", [citation()],
                         -3.2, -0.2, -1.1)
    text = best.text
    assert text.count("Marta Ilves") == 2  # what Grounded answers: the answer, then "Rationale: ..."
    turn = Turn(question="Who polished the mirror?", answer=text, mode="grounded", citations=[citation()],
                evidence=EvidenceAligner().align(text, [ZEPHYR_HIT], question="Who polished the mirror?"),
                extras=GroundedExtras(drafts=[best]), supported=True)
    messages = chat_messages([turn])
    body = messages[1]["content"]
    assert words(body) == "Marta Ilves polished it.[1]" and "Rationale" not in body
    drafts = next(m for m in messages if m.get("metadata", {}).get("title", "").startswith("🧪 Drafts"))
    assert "Its primary mirror was polished by Marta Ilves." in drafts["content"]
    # any other text is shown whole, even when a mode's extras are there
    other = Turn(question="q", answer="Quillfield.\n\nRationale: said so.", mode="grounded",
                 extras=GroundedExtras(drafts=[best]))
    assert "Rationale: said so." in chat_messages([other])[1]["content"]


def test_a_later_turn_gets_panel_ids_and_links_of_its_own_while_it_streams(make_services):
    s = make_services()
    chat = ChatController(s)
    cid = run(chat.respond(None, "first?", Settings()))[-1].chat_id
    final = run(chat.respond(cid, "second?", Settings()))[-1]
    ids = [m["metadata"]["id"] for m in final.messages if m.get("metadata", {}).get("id")]
    assert len(ids) == len(set(ids)) and "sources-1" in ids and "sources-1-1" in ids
    assert marker(1, turn=1) in final.messages[final.messages.index(
        next(m for m in final.messages if m["content"] == "second?")) + 1]["content"]
    assert chat.load(cid).messages == final.messages


def test_pdf_chunks_read_as_paragraphs_and_the_highlight_stays_on_its_characters():
    from localrag.ui.render import chunk_rows, highlighted_markdown, marked_rows

    text = ("1 Introduction\nThe committee discussed at length the recon-\nstruction of the old bridge near the harbor\n"
            "and agreed to start in spring.\n• first item\n• second item")
    rows = ["".join(t for t, _ in segs) for segs in marked_rows(text, ())]
    assert rows == text.split("\n")  # not a PDF: every line as it is
    rows = ["".join(t for t, _ in segs) for segs in marked_rows(text, (), pdf=True)]
    assert rows == ["1 Introduction", "The committee discussed at length the recon-struction of the old bridge near "
                    "the harbor and agreed to start in spring.", "• first item", "• second item"]
    start = text.index("old bridge")
    end = text.index("agreed") + len("agreed")
    shown = highlighted_markdown(text, [(start, end)], pdf=True)
    assert "the <mark>old bridge near the harbor and agreed</mark> to start" in shown  # across the joined line
    pieces = [p for row in chunk_rows(text, pdf=True) for p in row]
    assert all(0 <= a <= b <= len(text) for a, b, _ in pieces)
    assert "".join(text[a:b] for a, b, _ in pieces) == text.replace("\n", "")  # every character, once


def test_the_model_sees_an_earlier_answer_as_its_first_sentence(make_services, fake_answering):
    """A small model repeated an earlier answer in full when it saw it in full (see llm_history)."""
    fake_answering.pieces = ["Marta Ilves polished it. ", "She worked for three years. ", "The mirror is 4.2 metres."]
    s = make_services()
    chat = ChatController(s)
    cid = run(chat.respond(None, "Who polished the mirror?", Settings()))[-1].chat_id
    fake_answering.pieces = ["x" * 500]
    cid = run(chat.respond(cid, "And how wide is it?", Settings()))[-1].chat_id
    run(chat.respond(cid, "Anything else?", Settings()))
    assert fake_answering.last_request.history == (
        {"role": "user", "content": "Who polished the mirror?"}, {"role": "assistant", "content": "Marta Ilves polished it."},
        {"role": "user", "content": "And how wide is it?"}, {"role": "assistant", "content": "x" * 200 + " …"})
    assert s.history.turns(cid)[0].answer.endswith("The mirror is 4.2 metres.")  # the chat keeps it whole


def test_a_reopened_chat_restores_its_mode_and_k(make_services):
    """The mode reset to Plain after a restart, even when reopening a Grounded chat: reopening gives
    the mode of its last answer (by id, an older chat's alias too) and the k it searched with."""
    first = make_services()
    first.index("default").docs["/x/zephyr.md"] = 3
    grounded = run(ChatController(first).respond(None, "Who polished the mirror?", Settings(mode="grounded")))[-1]
    plain = run(ChatController(first).respond(None, "Who?", Settings(mode="plain")))[-1]
    first.history.close()
    second = make_services()  # a restarted app
    chat = ChatController(second)
    assert (chat.load(grounded.chat_id).mode, chat.load(grounded.chat_id).k) == ("grounded", 5)
    assert chat.load(plain.chat_id).mode == "plain"
    older = second.history.new_chat("old")
    second.history.add_turn(older, Turn(question="q", answer="a", mode="rasd"))  # as older chats stored it
    assert (chat.load(older).mode, chat.load(older).k) == ("speedup", 0)
    gone = second.history.new_chat("gone")
    second.history.add_turn(gone, Turn(question="q", answer="a", mode="no-such-mode"))
    assert chat.load(gone).mode == "" and chat.load(None).mode == ""  # nothing to restore: left as it is


class TimingSpeedup(type(FAKE_MODES["speedup"])):
    """The fake Speedup, with a one-time warm-up that lasts until the test lets it end, and gives
    way (WarmUpStopped) when ``stop`` says an answer waits."""

    release = threading.Event()
    started = threading.Event()
    threads: list[str] = []
    calls = 0

    def warm_up(self, answerer, stop=lambda: False) -> str:
        TimingSpeedup.calls += 1
        TimingSpeedup.threads.append(threading.current_thread().name)
        TimingSpeedup.started.set()
        while not TimingSpeedup.release.wait(0.01):
            if stop():
                raise WarmUpStopped("an answer waits")
        return "Speedup (RASD): timed the forward passes of fake-model once in 0.1 s"

    @classmethod
    def reset(cls) -> None:
        cls.release.clear()
        cls.started.clear()
        cls.threads, cls.calls = [], 0


def test_the_one_time_timing_runs_ahead_gives_way_to_an_answer_then_ends(make_services, monkeypatch):
    """Speedup's first answer took 56.5 s longer (timing the models): the timing now runs when the
    app starts, on the generation thread, in line like an answer; an answer that comes meanwhile
    stops it and goes first, and the timing starts again once the model is idle."""
    import localrag.app.services as services_module

    monkeypatch.setattr(services_module, "WARM_UP_IDLE_S", 0.3)
    TimingSpeedup.reset()
    s = make_services(modes={**FAKE_MODES, "speedup": TimingSpeedup()})
    done: list[str] = []
    warm = threading.Thread(target=lambda: done.extend(s.warm_up()))
    warm.start()
    assert TimingSpeedup.started.wait(10) and s.warming_up
    final = run(ChatController(s).respond(None, "Who polished the mirror?", Settings(mode="speedup")))[-1]
    assert "Marta Ilves" in final.messages[1]["content"] and done == []  # answered while the timing waits
    TimingSpeedup.release.set()
    warm.join(10)
    assert done == ["Speedup (RASD): timed the forward passes of fake-model once in 0.1 s"]
    assert TimingSpeedup.calls == 2 and set(TimingSpeedup.threads) == {"localrag-generation"}  # never beside an answer


def test_an_answer_asked_during_the_timing_waits_with_a_message_until_it_makes_way(make_services):
    TimingSpeedup.reset()
    s = make_services(modes={**FAKE_MODES, "speedup": TimingSpeedup()})
    s._someone_waits = lambda: False  # a warm-up that cannot stop midway (a model being loaded)
    warm = threading.Thread(target=s.warm_up)
    warm.start()
    assert TimingSpeedup.started.wait(10)
    views = []
    for view in ChatController(s).respond(None, "Who polished the mirror?", Settings(mode="speedup")):
        views.append(view)
        if len(views) == 2:
            assert view.busy and WARMING_UP in view.messages[1]["content"], view.messages[1]
            TimingSpeedup.release.set()
    warm.join(10)
    assert not views[-1].busy and "Marta Ilves" in views[-1].messages[1]["content"] and not s.warming_up


def test_an_answer_that_came_first_goes_before_the_timing(make_services):
    TimingSpeedup.reset()
    TimingSpeedup.release.set()
    s = make_services(modes={**FAKE_MODES, "speedup": TimingSpeedup()})
    ticket = s.queue.submit("tab-1")  # an answer asked before the warm-up
    assert s.queue.wait_turn(ticket, timeout=0)
    done: list[str] = []
    warm = threading.Thread(target=lambda: done.extend(s.warm_up()))
    warm.start()
    time.sleep(0.3)
    assert done == [] and not s.warming_up and s.queue.position(ticket) == 1  # the warm-up waits its turn
    s.queue.release(ticket)
    warm.join(10)
    assert len(done) == 1


def test_closing_stops_the_answer_under_way_then_closes(make_services, fake_answering):
    """At SIGTERM the app closes its services: the answer being written stops at its next piece
    (instead of the process living on until it ends), then the models and the history close."""
    s = make_services()
    started = threading.Event()
    fake_answering.pieces = ["piece "] * 200
    fake_answering.on_piece = lambda i: (started.set(), time.sleep(0.02))
    views: list = []
    answering = threading.Thread(target=lambda: views.extend(ChatController(s).respond(None, "q", Settings())))
    answering.start()
    assert started.wait(10)
    s.close()
    answering.join(10)
    assert not answering.is_alive()
    assert "Stopped." in views[-1].messages[1]["content"] and views[-1].messages[1]["content"].count("piece") < 200
