"""The Gradio page: layout and event wiring only; all logic lives in ``handlers``.

    demo = build_app(services)
    demo.queue().launch(server_name="127.0.0.1", server_port=7860)

Left sidebar: saved chats (SQLite). Middle: the chat, question box, Stop /
Regenerate, accepted-tokens-per-step plot. Right: Documents (collection, drop
zone for files or a folder, ingest progress per file and overall with Stop and Continue, document
list, failed files, remove, folders kept in sync), Settings (mode toggle with availability, what an
answer your documents do not support gets, retrieval k, temperature, max tokens, model / draft /
GPU layers) and Source (a citation opened: a PDF's page with the passage highlighted, a heading's
chunk, code at its lines).
"""

from __future__ import annotations

import gradio as gr
import pandas as pd
from gradio.utils import NamedString

from localrag.app.services import DEFAULT_COLLECTION, Services
from localrag.ui.documents import DocsController
from localrag.ui.handlers import ChatController, ChatView, SettingsController, history_choices
from localrag.ui.render import plotted_steps
from localrag.ui.settings import DRAFT_AUTO, MODE_DEFAULT, NO_DRAFT, Settings
from localrag.ui.sources import SourceController, SourceView

K_MIN, K_MAX = 1, 20  # the retrieval k slider's range
PREFILL_CHOICES = [("Exact: every prompt token read", "exact"),
                   ("Reuse chunks (approximate): a faster first word; the answer may differ", "reuse")]
PREFILL_INFO = ("Reuse takes each retrieved chunk's keys and values from a cache on disk, warmed in the "
                "background, and reads only the head of each chunk and your question again. Measured on a "
                "2-core CPU: a new question's first word in 0.21x the exact wait once its chunks are warmed. "
                "Approximate: about 4 in 10 answers differ from exact reading, and on benchmark questions they "
                "scored 4 to 7 points (of 100) lower, so Exact stays the default.")
WATCH_REFRESH_S = 2.0  # how often the page shows the watched folders' states
WATCH_HELP = ("A folder on this machine, by its path (the app runs here, so it reads the folder in place; a "
              "dropped folder is a copy). It is indexed now; then every file created, edited, renamed or deleted "
              "in it shows within seconds, and the app follows it again at every start.")
WATCH_REFUSED = ("Watching a folder by its path is offered only when the app serves this machine alone "
                 "(127.0.0.1, no share link): it reads this machine's files. On the machine itself, "
                 "`python -m localrag watch PATH` keeps a folder in sync.")
CSS = """
#chatbot { min-height: 520px; }
#stats-plot { max-height: 220px; }
.small-note { font-size: 0.9em; opacity: 0.85; }
.lr-unsupported { text-decoration: underline dotted; text-decoration-thickness: 2px; cursor: help; }
#chatbot mark, #source-body mark { background: #fde68a; color: inherit; padding: 0 1px; border-radius: 2px; }
a.lr-open { cursor: pointer; }
#source-body .lr-page-view { overflow: auto; max-height: 72vh; border: 1px solid #d4d4d8; background: #f4f4f5; }
#source-body img.lr-page { display: block; max-width: none !important; height: auto; margin: 0; }
#source-body .lr-zoom { display: flex; gap: 6px; align-items: center; margin-bottom: 6px; }
#source-body .lr-zoom button { padding: 2px 10px; border: 1px solid #d4d4d8; border-radius: 6px; background: white;
                               cursor: pointer; min-width: 2.2em; }
#source-body .lr-zoom-level { font-size: 0.85em; opacity: 0.8; margin-left: 4px; }
#source-body pre.lr-code { white-space: pre-wrap; font-size: 0.85em; line-height: 1.45; }
#source-body .lr-ln { display: inline-block; min-width: 3.5em; padding-right: 0.8em; text-align: right;
                      color: #a1a1aa; user-select: none; }
#source-body .lr-chunk { line-height: 1.5; }
"""
SOURCE_HELP = ("Open a citation to see it here: the [1] after a sentence of an answer, or *Open…* in its "
               "📚 Sources. A PDF opens at its page with the passage highlighted.")
UNSUPPORTED_CHOICES = [("Mode default (Plain and Speedup warn, Grounded refuses)", MODE_DEFAULT),
                       ("Warn: show the answer, marked", "warn"), ("Refuse: say the documents do not support it", "refuse")]
THEME = gr.themes.Soft(primary_hue="indigo")
# Gradio's File component has no option for its drop-zone text, and a folder zone saying "Drop File
# Here" misleads: this rewrites that one text node (kept up to date as Gradio re-renders it).
HEAD = """<script>
(() => {
  const relabel = () => document.querySelectorAll('#upload-folder [data-testid="upload-text"]').forEach(el => {
    for (const node of el.childNodes) {
      if (node.nodeType === Node.TEXT_NODE && node.textContent.includes("Drop File Here")) {
        node.textContent = node.textContent.replace("Drop File Here", "Drop a folder here");
      }
    }
  });
  new MutationObserver(relabel).observe(document.documentElement, {childList: true, subtree: true, characterData: true});
})();
// A citation link (class lr-open, its reference in a class lr-ref-...) opens in the Source tab: the
// reference goes into a hidden box and a hidden button sends it (the server looks it up in the chat).
document.addEventListener("click", (ev) => {
  const link = ev.target.closest && ev.target.closest("a.lr-open");
  if (!link) return;
  ev.preventDefault();
  ev.stopPropagation();
  const ref = [...link.classList].find(c => c.startsWith("lr-ref-"));
  const box = document.querySelector("#source-ref textarea, #source-ref input");
  if (!ref || !box) return;
  box.value = ref;
  box.dispatchEvent(new Event("input", {bubbles: true}));
  setTimeout(() => document.querySelector("#source-open").click(), 50);
}, true);
// A PDF page (render.page_html): shown at its actual size (96 dpi: body text as a PDF viewer shows
// it at 100 %), or the panel's width when that is wider, and scrolled to the highlighted passage;
// the zoom buttons change the size, keeping the middle of the view where it was. The zoom chosen
// stays for the next page opened.
(() => {
  const ZOOMS = [0.5, 0.75, 1, 1.25, 1.5, 2, 3];
  let zoom = null;  // null: automatic; "fit": the panel's width; a number: times the actual size
  const actual = v => parseFloat(v.dataset.widthPt) * 96 / 72;
  const size = v => {
    const img = v.querySelector("img.lr-page"), fit = v.clientWidth;
    const w = zoom === "fit" ? fit : zoom === null ? Math.max(actual(v), fit) : actual(v) * zoom;
    img.style.width = Math.round(w) + "px";
    const level = v.parentElement.querySelector(".lr-zoom-level");
    if (level) level.textContent = Math.round(100 * w / actual(v)) + " %";
    return w;
  };
  const focus = v => {
    const w = size(v), h = w * parseFloat(v.dataset.heightPt) / parseFloat(v.dataset.widthPt);
    if (v.dataset.focusY === undefined) { v.scrollTop = 0; v.scrollLeft = 0; return; }
    v.scrollTop = Math.max(0, parseFloat(v.dataset.focusY) * h - v.clientHeight * 0.2);
    v.scrollLeft = Math.max(0, parseFloat(v.dataset.focusX) * w - 24);
  };
  const setUp = (v, tries = 0) => {
    if (!v.isConnected) return;
    if (v.clientWidth === 0 && tries < 100) { setTimeout(() => setUp(v, tries + 1), 50); return; }  // a hidden tab
    focus(v);
    v.dataset.lrReady = "1";
  };
  new MutationObserver(() => document.querySelectorAll(".lr-page-view:not([data-lr-placed])").forEach(v => {
    v.dataset.lrPlaced = "1";
    setUp(v);
  })).observe(document.documentElement, {childList: true, subtree: true});
  document.addEventListener("click", (ev) => {
    const b = ev.target.closest && ev.target.closest(".lr-zoom-btn");
    if (!b) return;
    const v = b.closest(".lr-pdf").querySelector(".lr-page-view");
    const cx = (v.scrollLeft + v.clientWidth / 2) / v.scrollWidth, cy = (v.scrollTop + v.clientHeight / 2) / v.scrollHeight;
    const now = v.querySelector("img.lr-page").getBoundingClientRect().width / actual(v);
    const step = b.dataset.zoom;
    if (step === "fit") zoom = "fit";
    else if (step === "actual") zoom = 1;
    else if (step === "in") zoom = ZOOMS.find(z => z > now + 0.01) ?? ZOOMS[ZOOMS.length - 1];
    else zoom = [...ZOOMS].reverse().find(z => z < now - 0.01) ?? ZOOMS[0];
    size(v);
    v.scrollLeft = cx * v.scrollWidth - v.clientWidth / 2;
    v.scrollTop = cy * v.scrollHeight - v.clientHeight / 2;
  });
})();
</script>"""


def without_stray_files(box: gr.File) -> gr.File:
    """``box`` without the empty file its preprocess leaves: Gradio 6.31's ``File._process_single_file``
    opens ``NamedTemporaryFile(delete=False, dir=self.GRADIO_CACHE)`` for every uploaded file, renames
    the object and never writes or deletes the file, so each upload left an empty ``tmp*`` file in
    ``<data dir>/tmp``, beside the uploads in flight (whose temp files have the same names, so they
    cannot be swept up safely afterwards). This box hands over the uploaded path as Gradio does,
    without opening that file. Set on the instance: a subclass of a Gradio component makes Gradio
    write a ``.pyi`` stub beside this module."""
    original = box._process_single_file

    def process(f):
        if box.type != "filepath" or box.file_types:  # what this does not cover: Gradio's own
            return original(f)
        return NamedString(f.path)

    box._process_single_file = process
    return box


def build_app(services: Services) -> gr.Blocks:
    chat, docs, conf = ChatController(services), DocsController(services), SettingsController(services)
    sources = SourceController(services)
    usable, unusable = conf.models()
    model_choices = conf.model_choices(usable)
    default = Settings()

    def settings_of(mode, collection, draft, temperature, max_tokens, k, on_unsupported, prefill) -> Settings:
        return Settings(mode=mode or default.mode, collection=(collection or default.collection).strip(),
                        draft_model=draft or DRAFT_AUTO, temperature=float(temperature or 0),
                        max_tokens=int(max_tokens or default.max_tokens), k=int(k or default.k),
                        on_unsupported=on_unsupported or default.on_unsupported, prefill=prefill or default.prefill)

    def plot_update(steps: list[int]):
        steps = plotted_steps(steps)
        if not steps:
            return gr.update(visible=False)
        # steps as categories in their own order: a numeric axis gets padded to fractions and
        # negative ticks (it started at -20 on long answers); whole tokens on the y axis, from 0
        labels = [str(i) for i in range(1, len(steps) + 1)]
        return gr.update(value=pd.DataFrame({"step": labels, "accepted": steps}), sort=labels, visible=True,
                         y_lim=[0, max(steps)])

    def chat_outputs(v: ChatView, sidebar: bool = True):
        if v.note:
            gr.Info(v.note)
        hist = gr.update(choices=history_choices(services), value=v.chat_id) if sidebar else gr.skip()
        return v.messages, v.chat_id, plot_update(v.steps), hist

    with gr.Blocks(title="localrag") as demo:
        chat_id = gr.State(None)
        with gr.Sidebar(label="Chats", open=True, elem_id="sidebar"):
            gr.Markdown("### 💬 Chats")
            new_btn = gr.Button("➕ New chat", elem_id="new-chat")
            history = gr.Radio(choices=history_choices(services), label="History", elem_id="history",
                               interactive=True)
        with gr.Row(equal_height=False):
            with gr.Column(scale=3):
                gr.Markdown("## 🔒 localrag — chat with your files, locally")
                model_status = gr.Markdown(conf.model_status(), elem_id="model-status")
                chatbot = gr.Chatbot(elem_id="chatbot", height=560, render_markdown=True, buttons=["copy"],
                                     label="Chat", placeholder=docs.placeholder(default.collection))
                with gr.Row():
                    question = gr.Textbox(placeholder="Ask about your documents…", show_label=False,
                                          scale=6, elem_id="question", autofocus=True, lines=1)
                    send = gr.Button("Send", variant="primary", scale=1, elem_id="send")
                with gr.Row():
                    stop = gr.Button("⏹ Stop", size="sm", elem_id="stop")
                    regen = gr.Button("🔄 Regenerate", size="sm", elem_id="regenerate")
                plot = gr.BarPlot(x="step", y="accepted", title="Accepted tokens per step (last answer)",
                                  height=200, visible=False, elem_id="stats-plot", y_axis_format="d")
                # what the citation links send (see HEAD): a reference, looked up in the chat; here, not in
                # the Source tab, whose content is not in the page until the tab is first shown
                source_ref = gr.Textbox(visible="hidden", elem_id="source-ref")
                source_open = gr.Button("open", visible="hidden", elem_id="source-open")
            # "wrap": with "menu" (the default), in a 1400-pixel window the tab bar re-rendered without end
            # (its tabs kept being detached from the page, too fast to click), once there were three
            with gr.Column(scale=2), gr.Tabs(elem_id="side-tabs", overflow_behavior="wrap") as side_tabs:
                with gr.Tab("📄 Documents", id="documents"):
                    collection = gr.Dropdown(choices=docs.collections(), value=default.collection,
                                             allow_custom_value=True, label="Collection", elem_id="collection",
                                             info="Type a new name to start a new collection.")
                    files = without_stray_files(gr.File(file_count="multiple", label="Drop files here",
                                                        elem_id="upload-files"))
                    folder = without_stray_files(gr.File(file_count="directory", label="…or a folder",
                                                         elem_id="upload-folder"))
                    ingest_summary = gr.Markdown(elem_id="ingest-summary")
                    cache_note = gr.Markdown(elem_id="chunk-cache-note", elem_classes="small-note")
                    with gr.Row():
                        ingest_stop = gr.Button("⏹ Stop ingest", size="sm", visible=False, elem_id="ingest-stop")
                        ingest_resume = gr.Button("▶ Continue", size="sm", visible=False, elem_id="ingest-resume")
                    # fixed shares of the panel's width, text wrapped: a long reason stays readable; the
                    # short columns are wide enough for "chunks" and "embedding…" on one line
                    ingest_table = gr.Dataframe(headers=["file", "status", "chunks", "reason"], visible=False,
                                                elem_id="ingest-table", interactive=False, wrap=True,
                                                column_widths=["28%", "20%", "14%", "38%"])
                    doc_list = gr.Dataframe(headers=["document", "chunks", "status"],
                                            value=docs.documents(default.collection), label="Documents in collection",
                                            elem_id="doc-list", interactive=False, wrap=True,
                                            column_widths=["58%", "18%", "24%"])
                    failed = docs.failed(default.collection)
                    failed_list = gr.Dataframe(headers=["file", "why it failed"], value=failed,
                                               label="Failed files (not indexed)", elem_id="failed-list",
                                               interactive=False, wrap=True, visible=bool(failed),
                                               column_widths=["35%", "65%"])
                    with gr.Row():
                        remove_pick = gr.Dropdown(choices=docs.document_choices(default.collection), label="Remove",
                                                  elem_id="remove-pick", scale=3)
                        remove_btn = gr.Button("🗑 Remove", size="sm", scale=1, elem_id="remove")
                    remove_note = gr.Markdown()
                    with gr.Accordion("👁 Keep a folder in sync", open=True, elem_id="watch-panel"):
                        local = services.serves_this_machine_only
                        gr.Markdown(WATCH_HELP if local else WATCH_REFUSED, elem_classes="small-note")
                        with gr.Row():
                            watch_path = gr.Textbox(label="Folder on this machine", placeholder="/home/you/notes",
                                                    scale=3, elem_id="watch-path", interactive=local)
                            watch_btn = gr.Button("👁 Keep in sync", size="sm", scale=1, elem_id="watch-add",
                                                  interactive=local)
                        watch_note = gr.Markdown(elem_id="watch-note")
                        watch_list = gr.Dataframe(headers=["folder", "state", "files", "failed files", "last sync"],
                                                  value=docs.watched(default.collection), label="Watched folders",
                                                  elem_id="watch-list", interactive=False, wrap=True,
                                                  column_widths=["26%", "24%", "10%", "22%", "18%"])
                        with gr.Row():
                            unwatch_pick = gr.Dropdown(choices=docs.watched_choices(default.collection),
                                                       label="Stop watching", elem_id="unwatch-pick", scale=3)
                            unwatch_btn = gr.Button("Stop", size="sm", scale=1, elem_id="unwatch")
                        # a row of its own: beside the picker, its label was cut to "also remove its docu"
                        unwatch_delete = gr.Checkbox(label="also remove its documents", elem_id="unwatch-delete")
                    watch_timer = gr.Timer(WATCH_REFRESH_S)
                    syncs_seen = gr.State(0)
                with gr.Tab("⚙️ Mode & model"):
                    mode = gr.Radio(choices=[(m.label, key) for key, m in services.modes.items()],
                                    value=default.mode, label="Mode", elem_id="mode")
                    mode_note = gr.Markdown(conf.mode_note(default.mode), elem_id="mode-note")
                    on_unsupported = gr.Radio(choices=UNSUPPORTED_CHOICES, value=default.on_unsupported,
                                              label="When your documents do not support an answer",
                                              elem_id="on-unsupported")
                    prefill = gr.Radio(choices=PREFILL_CHOICES, value=default.prefill, elem_id="prefill",
                                       label="Reading the documents (Plain and Speedup)", info=PREFILL_INFO)
                    k = gr.Slider(K_MIN, K_MAX, value=default.k, step=1, label="Retrieval k (chunks)")
                    temperature = gr.Slider(0.0, 1.5, value=default.temperature, step=0.05,
                                            label="Temperature (0 = greedy)")
                    max_tokens = gr.Slider(16, 2048, value=default.max_tokens, step=16, label="Max tokens", elem_id="max-tokens")
                    model = gr.Dropdown(choices=model_choices, value=services.model_config.model
                                        if services.model_config.model in model_choices else None,
                                        allow_custom_value=True, label="Model (name or .gguf path)", elem_id="model")
                    # what the header leaves out: the file, its size, and what the model is good for, measured
                    model_details = gr.Markdown(conf.model_details(), elem_id="model-details", elem_classes="small-note")
                    gpu_layers = gr.Number(value=services.model_config.n_gpu_layers, precision=0,
                                           label="GPU layers (-1 = all, 0 = CPU)")
                    load_btn = gr.Button("Load model", size="sm")
                    draft = gr.Dropdown(choices=[("Automatic: the loaded model's own draft model", DRAFT_AUTO),
                                                 ("None: speculate from retrieval only", NO_DRAFT), *usable],
                                        value=default.draft_model, label="Draft model (Speedup)", elem_id="draft")
                    draft_note = gr.Markdown(elem_id="draft-note")
                    if unusable:
                        gr.Markdown("**Unusable models:**\n" + "\n".join(f"- {u}" for u in unusable),
                                    elem_classes="small-note")
                with gr.Tab("🔍 Source", id="source"):
                    source_head = gr.Markdown(SOURCE_HELP, elem_id="source-head")
                    with gr.Row():
                        # a paged source's (a PDF's) only: hidden for Markdown, text, HTML, code
                        source_prev = gr.Button("◀ Previous page", size="sm", visible=False, elem_id="source-prev")
                        source_next = gr.Button("Next page ▶", size="sm", visible=False, elem_id="source-next")
                    source_body = gr.HTML(elem_id="source-body")
                    source_at = gr.State(None)  # the open source: (SourceKey, previous page, next page)

        settings_inputs = [mode, collection, draft, temperature, max_tokens, k, on_unsupported, prefill]

        # ---------------------------------------------------------------- chat
        # Each browser session is its own asker: its Stop cancels its own answers only.
        def respond(cid, text, mode_, collection_, draft_, temperature_, max_tokens_, k_, unsupported_, prefill_,
                    request: gr.Request):
            settings = settings_of(mode_, collection_, draft_, temperature_, max_tokens_, k_, unsupported_, prefill_)
            for i, view in enumerate(chat.respond(cid, text, settings, owner=request.session_hash or "")):
                yield (*chat_outputs(view, sidebar=i == 0 or not view.busy), "")

        def regenerate(cid, mode_, collection_, draft_, temperature_, max_tokens_, k_, unsupported_, prefill_,
                       request: gr.Request):
            settings = settings_of(mode_, collection_, draft_, temperature_, max_tokens_, k_, unsupported_, prefill_)
            for i, view in enumerate(chat.regenerate(cid, settings, owner=request.session_hash or "")):
                yield chat_outputs(view, sidebar=i == 0 or not view.busy)

        def stop_mine(request: gr.Request):
            chat.stop(request.session_hash or "")

        chat_outs = [chatbot, chat_id, plot, history]
        for trigger in (question.submit, send.click):
            trigger(respond, [chat_id, question, *settings_inputs], [*chat_outs, question])
        regen.click(regenerate, [chat_id, *settings_inputs], chat_outs)
        stop.click(stop_mine, None, None, queue=False)
        # another chat: the Source tab no longer shows the last chat's source
        source_outs = [source_head, source_body, source_prev, source_next, source_at]
        no_source = (SOURCE_HELP, "", gr.update(visible=False), gr.update(visible=False), None)
        new_btn.click(lambda: ([], None, gr.update(visible=False), gr.update(value=None), *no_source), None,
                      [*chat_outs, *source_outs])

        def reopen(cid):
            """A chat from the history, in the mode (and with the k) its last answer used."""
            v = chat.load(cid)
            return (*chat_outputs(v), *no_source, gr.update(value=v.mode) if v.mode else gr.skip(),
                    gr.update(value=v.k) if K_MIN <= v.k <= K_MAX else gr.skip())

        history.input(reopen, [history], [*chat_outs, *source_outs, mode, k])

        # ---------------------------------------------------------------- documents
        def refresh_docs(coll):
            """The document list, the failed files, the remove picker and the chat's placeholder."""
            failed_rows = docs.failed(coll)
            return (docs.documents(coll), gr.update(value=failed_rows, visible=bool(failed_rows)),
                    gr.update(choices=docs.document_choices(coll), value=None),
                    gr.update(placeholder=docs.placeholder(coll)))

        docs_outs = [doc_list, failed_list, remove_pick, chatbot]
        ingest_outs = [ingest_summary, ingest_table, ingest_stop, ingest_resume, *docs_outs, collection]

        def ingest_view(v, coll):
            """One view of an ingest: its summary and table, Stop while it runs, Continue when a stopped
            one left files; once done, the lists of the collection it wrote to."""
            coll = (v.collection or coll or DEFAULT_COLLECTION).strip()
            table = gr.update(value=v.rows, visible=bool(v.rows))
            if not v.done:
                return (v.summary, table, gr.update(visible=True), gr.update(visible=False),
                        *[gr.skip()] * (len(docs_outs) + 1))
            return (v.summary, table, gr.update(visible=False), gr.update(visible=v.resumable),
                    *refresh_docs(coll), gr.update(choices=docs.collections(), value=coll))

        def ingest(paths, coll, request: gr.Request):
            coll = (coll or DEFAULT_COLLECTION).strip()
            for v in docs.ingest(paths, coll, owner=request.session_hash or ""):
                yield *ingest_view(v, coll), None if v.done else gr.skip()  # the drop zone emptied when done

        def resume(coll, request: gr.Request):
            for v in docs.resume(owner=request.session_hash or ""):
                yield ingest_view(v, coll)

        def stop_ingest(request: gr.Request):
            return docs.stop_ingest(request.session_hash or "")

        for box in (files, folder):
            box.upload(ingest, [box, collection], [*ingest_outs, box])
        ingest_resume.click(resume, [collection], ingest_outs)
        # not queued: it must run while the ingest it stops holds a worker
        ingest_stop.click(stop_ingest, None, [ingest_summary], queue=False)

        def pick_collection(coll):
            why = docs.check_collection(coll)
            return (f"❌ {why}" if why else "", *refresh_docs(coll))

        collection.change(pick_collection, [collection], [ingest_summary, *docs_outs])
        collection.change(lambda coll: watch_lists(coll or DEFAULT_COLLECTION), [collection],
                          [watch_list, unwatch_pick])

        def remove(coll, path):
            return (docs.remove(coll, path), *refresh_docs(coll))

        remove_btn.click(remove, [collection, remove_pick], [remove_note, *docs_outs])

        # ---------------------------------------------------------------- sources
        def show_source(view: SourceView):
            at = (view.key, view.prev_page, view.next_page)  # what the page buttons open (not the image)
            paged = view.page is not None
            return (view.head, view.body, gr.update(visible=paged, interactive=view.prev_page is not None),
                    gr.update(visible=paged, interactive=view.next_page is not None), at, gr.Tabs(selected="source"))

        def turn_page(at, step: int):
            key, prev_page, next_page = at or (None, None, None)
            return show_source(sources.page(key, prev_page if step < 0 else next_page))

        shown_outs = [*source_outs, side_tabs]
        source_open.click(lambda cid, ref: show_source(sources.open(cid, ref)), [chat_id, source_ref], shown_outs)
        source_prev.click(lambda at: turn_page(at, -1), [source_at], shown_outs)
        source_next.click(lambda at: turn_page(at, 1), [source_at], shown_outs)

        # ---------------------------------------------------------------- watched folders
        def watch_lists(coll):
            return docs.watched(coll), gr.update(choices=docs.watched_choices(coll), value=None)

        def watch(coll, path):
            coll = (coll or DEFAULT_COLLECTION).strip()
            note = docs.watch_folder(coll, path)
            return (note, *watch_lists(coll), gr.update(choices=docs.collections(), value=coll))

        for trigger in (watch_btn.click, watch_path.submit):
            trigger(watch, [collection, watch_path], [watch_note, watch_list, unwatch_pick, collection])

        def unwatch(coll, folder, delete):
            coll = (coll or DEFAULT_COLLECTION).strip()
            return (docs.unwatch_folder(coll, folder, bool(delete)), *watch_lists(coll), *refresh_docs(coll))

        unwatch_btn.click(unwatch, [collection, unwatch_pick, unwatch_delete],
                          [watch_note, watch_list, unwatch_pick, *docs_outs])

        def tick(coll, seen):
            """Watched folders' states and the chunk cache's count every few seconds; the document
            list once a sync finished."""
            coll = (coll or DEFAULT_COLLECTION).strip()
            done = services.watch_syncs()
            if done == seen:
                return docs.watched(coll), *[gr.skip()] * len(docs_outs), seen, docs.cache_note(coll)
            listed, failed_rows, _, placeholder = refresh_docs(coll)
            return (docs.watched(coll), listed, failed_rows, gr.update(choices=docs.document_choices(coll)),
                    placeholder, done, docs.cache_note(coll))

        watch_timer.tick(tick, [collection, syncs_seen], [watch_list, *docs_outs, syncs_seen, cache_note],
                         queue=False, show_progress="hidden")

        # ---------------------------------------------------------------- settings
        mode.change(conf.mode_note, [mode, draft], [mode_note])
        prefill.change(lambda p, coll: docs.prefill_changed(p, (coll or DEFAULT_COLLECTION).strip()),
                       [prefill, collection], [cache_note])
        draft.change(lambda d, m: (conf.draft_note(d), conf.mode_note(m, d)), [draft, mode], [draft_note, mode_note])

        def load_model(name, layers, m, d):
            gr.Info(f"Loading {name}…")
            msg = conf.load_model(name, int(layers or 0))
            picker = gr.update(choices=conf.model_choices(usable), value=services.model_config.model)
            return f"{msg}  \n{conf.model_status()}", conf.mode_note(m, d), picker, conf.model_details()

        load_btn.click(load_model, [model, gpu_layers, mode, draft], [model_status, mode_note, model, model_details])
        model.input(conf.model_details, [model], [model_details])

        def on_load(coll):
            coll = coll or DEFAULT_COLLECTION
            return (gr.update(choices=history_choices(services)), *refresh_docs(coll), conf.model_status(),
                    *watch_lists(coll))

        demo.load(on_load, [collection], [history, *docs_outs, model_status, watch_list, unwatch_pick])
    return demo
