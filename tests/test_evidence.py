"""The evidence aligner on hand-made cases (no model: the lexical signals and the rules).

Run: .venv/bin/python -m pytest tests/test_evidence.py -q
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass

import pytest

from localrag.answer import DECLINED, AnswerConfig, Answerer, checked_result, refusal_message
from localrag.evidence import (
    AnswerEvidence,
    CopiedSpan,
    EvidenceAligner,
    EvidenceConfig,
    declines,
    mark_citations,
    split_sentences,
    word_tokens,
)
from localrag.evidence.records import SMALL_MODELS_FIT
from localrag.rag.records import Hit
from localrag.results import ON_UNSUPPORTED, AnswerResult, AnswerStats


@dataclass(frozen=True)
class Chunk:
    chunk_id: str
    text: str
    file: str = "notes.txt"
    page: int | None = None
    line_start: int | None = 1
    line_end: int | None = 4


ZEPHYR = Chunk("zephyr", "The Zephyr telescope stands on Mount Kora. Its main mirror is 4.2 metres wide. "
                         "The mirror was polished by Marta Ilves in 1998, after two years of grinding.",
               file="zephyr.md", line_start=3, line_end=6)
GARDEN = Chunk("garden", "Tomatoes need full sun and deep watering twice a week. Turn the compost heap every "
                         "fortnight and keep it as damp as a wrung-out sponge.", file="garden.txt")
CONTRACT = Chunk("contract", "Either party may terminate this agreement with 30 days written notice. Invoices "
                             "are due within 14 days of receipt.", file="contract.pdf", page=2, line_start=None,
                 line_end=None)
CHUNKS = [ZEPHYR, GARDEN, CONTRACT]
QUESTION = "Who polished the mirror of the Zephyr telescope?"


@pytest.fixture(scope="module")
def aligner():
    return EvidenceAligner()


def _quoted(chunks, span) -> str:
    return next(c.text for c in chunks if c.chunk_id == span.chunk_id)[span.start:span.end]


def test_exact_copy_is_supported_with_the_copied_span(aligner):
    answer = "The mirror was polished by Marta Ilves in 1998."
    t0 = time.perf_counter()
    ev = aligner.align(answer, CHUNKS, question=QUESTION)
    took = time.perf_counter() - t0
    (s,) = ev.sentences
    assert s.supported and s.reason == "" and s.signals.exact == 1.0 and s.signals.overlap == 1.0
    assert [_quoted(CHUNKS, sp) for sp in s.spans] == ["The mirror was polished by Marta Ilves in 1998"]
    assert s.spans[0].file == "zephyr.md" and (s.spans[0].line_start, s.spans[0].line_end) == (3, 6)
    assert ev.cited == ("zephyr",) and ev.also_searched == ("garden", "contract")
    assert ev.supported and 0 < ev.score <= 1
    assert 0 < ev.seconds <= took  # the alignment's own time, inside the call


def test_a_paraphrase_finds_its_sentence_but_scores_below_a_copy(aligner):
    copy = aligner.align("The mirror was polished by Marta Ilves in 1998.", CHUNKS, question=QUESTION)
    para = aligner.align("Marta Ilves polished the telescope's mirror.", CHUNKS, question=QUESTION)
    (s,) = para.sentences
    assert s.signals.exact < 0.5 and s.signals.overlap == 1.0 and not s.signals.missing
    assert [_quoted(CHUNKS, sp) for sp in s.spans] == [
        "The mirror was polished by Marta Ilves in 1998, after two years of grinding."]
    assert copy.sentences[0].score > s.score  # without an embedder nothing else tells a paraphrase apart


def test_a_changed_number_makes_the_sentence_unsupported(aligner):
    ev = aligner.align("Its main mirror is 4.5 metres wide.", CHUNKS)
    (s,) = ev.sentences
    assert not s.supported and s.reason == 'number "4.5" not in the sources' and s.signals.missing == ("4.5",)
    assert s.signals.overlap == 0.8  # every other content word is there
    assert ev.cited == () and ev.also_searched == ("zephyr", "garden", "contract")
    right = aligner.align("Its main mirror is 4.2 metres wide.", CHUNKS)
    assert right.sentences[0].supported and right.sentences[0].score > s.score and right.score > ev.score
    assert right.cited == ("zephyr",)


def test_a_number_in_words_and_in_digits_is_the_same_number(aligner):
    """Asked "How many lanterns were in working order?" of a PDF that says "thirty-two", the default
    model answered "32": a right answer, which was shown as unsupported while "thirty-two" read as
    30 and 2. A compound number word is one number; a different one is still missing."""
    inventory = Chunk("inventory", "The lantern inventory lists forty lanterns, of which thirty-two were in "
                                   "working order at the end of the season.", file="report.pdf", page=3)
    question = "How many lanterns were in working order at the end of the season?"
    assert [t.norm for t in word_tokens("Thirty-two, forty-one, twenty and forty one")] == [
        "32", "41", "20", "and", "40", "1"]
    for answer in ("32", "32 lanterns were in working order.", "Thirty-two lanterns were in working order."):
        ev = aligner.align(answer, [inventory, GARDEN], question=question)
        assert ev.sentences[0].supported and ev.cited == ("inventory",), (answer, ev.sentences[0].reason)
    wrong = aligner.align("33 lanterns were in working order.", [inventory, GARDEN], question=question)
    assert wrong.sentences[0].signals.missing == ("33",) and not wrong.supported


def test_a_changed_name_or_date_makes_the_sentence_unsupported(aligner):
    name = aligner.align("The mirror was polished by Marta Kask in 1998.", CHUNKS).sentences[0]
    assert not name.supported and name.reason == 'name "Kask" not in the sources'
    date = aligner.align("The mirror was polished by Marta Ilves in 2003.", CHUNKS).sentences[0]
    assert not date.supported and date.reason == 'number "2003" not in the sources'
    made_up = aligner.align("The Zephyr telescope was built by Marta Ilves, a Polish-American astrophysicist.",
                            CHUNKS, question=QUESTION).sentences[0]
    assert not made_up.supported and set(made_up.signals.missing) == {"Polish", "American"}


BASE_PASSWD = Chunk("base-passwd", "Chapter 1. Introduction\n\nThe Debian base-passwd package contains the master "
                    "versions of /etc/passwd and /etc/group. The update-passwd tool keeps the entries in these master "
                    "files in sync on all Debian systems. They comprise only \"global static\" ids.",
                    file="users-and-groups.html", line_start=None, line_end=None)


def test_an_invented_command_is_not_supported_by_the_question_it_restates(aligner):
    """Found in a real browser (Debian's users-and-groups.html, SmolLM2, Plain): the answer restated the
    question's words, which the page holds, around a command the page never names, and came back
    supported with [1][2]. Code is literal: its words must be in the evidence, as numbers and names
    must; the right command, written as code, is still supported."""
    question = ("Which tool keeps the entries of the base-passwd master files /etc/passwd and /etc/group in sync "
                "on all Debian systems?")
    made_up = ("The command `sudo ln -s /etc/passwd /etc/passwd` is used to keep the entries of the base-passwd "
               "master files /etc/passwd and /etc/group in sync on all Debian systems.")
    ev = aligner.align(made_up, [BASE_PASSWD], question=question)
    (s,) = ev.sentences
    assert not s.supported and s.reason == 'code "sudo" not in the sources' and "ln" in s.signals.missing
    assert not ev.supported and ev.cited == ()
    right = aligner.align("The `update-passwd` tool keeps them in sync.", [BASE_PASSWD], question=question)
    assert right.supported and right.sentences[0].signals.missing == ()


def test_the_models_own_source_references_are_not_claims(aligner):
    """The 1.5B model writes "According to source [1], ..." (the prompt numbers its sources): the
    answer below is copied word for word from the chunk, yet its "1" was a number the evidence
    lacks, and the check called a right answer unsupported. The prompt's numbering is no claim."""
    answer = "According to source [1], the mirror was polished by Marta Ilves in 1998."
    ev = aligner.align(answer, CHUNKS, question=QUESTION)
    (s,) = ev.sentences
    assert s.supported and s.signals.missing == () and ev.supported and ev.cited == ("zephyr",)
    both = aligner.align("As sources [1] and [3] say, it was polished by Marta Ilves in 1998.", CHUNKS,
                         question=QUESTION)
    assert both.supported and both.sentences[0].signals.missing == ()
    wrong = aligner.align("According to source [1], it was polished by Marta Ilves in 2003.", CHUNKS,
                          question=QUESTION)
    assert not wrong.supported and wrong.sentences[0].signals.missing == ("2003",)  # a real number still counts


def test_a_sentence_from_another_document_is_not_found(aligner):
    ev = aligner.align("The harbour master logs every ship that enters the port.", CHUNKS)
    (s,) = ev.sentences
    assert not s.supported and s.spans == () and s.reason == "not found in the sources" and s.score == 0.0
    assert ev.cited == () and ev.also_searched == ("zephyr", "garden", "contract") and ev.score == 0.0


def test_a_sentence_joining_two_chunks_cites_both(aligner):
    answer = "Either party may terminate this agreement with 30 days written notice and tomatoes need full sun."
    ev = aligner.align(answer, CHUNKS)
    (s,) = ev.sentences
    assert s.signals.exact == 15 / 16  # all but the "and" joining the two
    assert [(sp.chunk_id, _quoted(CHUNKS, sp)) for sp in s.spans] == [
        ("contract", "Either party may terminate this agreement with 30 days written notice"),
        ("garden", "Tomatoes need full sun")]
    assert s.spans[0].page == 2
    assert ev.cited == ("contract", "garden") and ev.also_searched == ("zephyr",)


def test_two_sentences_are_numbered_in_order_of_first_use(aligner):
    answer = "Invoices are due within 14 days of receipt. The mirror was polished by Marta Ilves.\nShips dock at noon."
    ev = aligner.align(answer, CHUNKS)
    assert [s.text for s in ev.sentences] == ["Invoices are due within 14 days of receipt.",
                                              "The mirror was polished by Marta Ilves.", "Ships dock at noon."]
    assert [s.supported for s in ev.sentences] == [True, True, False]
    assert ev.cited == ("contract", "zephyr") and ev.also_searched == ("garden",)
    marked = mark_citations(answer, ev)
    assert marked.text == ("Invoices are due within 14 days of receipt.[1] The mirror was polished by Marta "
                           "Ilves.[2]\nShips dock at noon.")
    assert marked.numbering == ("contract", "zephyr")
    # the content-weighted answer score sits between its sentences' scores
    scores = [s.score for s in ev.sentences]
    assert min(scores) < ev.support < max(scores)


def test_an_empty_answer_has_no_evidence(aligner):
    for answer in ("", "   \n "):
        ev = aligner.align(answer, CHUNKS, question=QUESTION)
        assert ev.sentences == () and ev.score == 0.0 and not ev.supported
        assert ev.cited == () and ev.also_searched == ("zephyr", "garden", "contract")
        assert mark_citations(answer, ev).text == answer
    assert aligner.align("Anything at all.", []).sentences[0].reason == "not found in the sources"


def test_a_sentence_without_a_word_claims_nothing(aligner):
    """"...", a lone dash or a quoted full stop (the model wrote them, bench qa met one) are no claim:
    checked without error, no sentence of their own, and a real sentence beside them keeps its evidence."""
    for answer in ("...", "—", '"."'):
        ev = aligner.align(answer, CHUNKS, question=QUESTION)
        assert ev.sentences == () and not ev.supported and ev.cited == ()
    ev = aligner.align("The mirror was polished by Marta Ilves. —", CHUNKS, question=QUESTION)
    assert [(s.start, s.end) for s in ev.sentences] == [(0, 39)] and ev.supported and ev.cited == ("zephyr",)


def test_non_english_text():
    de = Chunk("de", "Das Teleskop steht auf dem Berg Kora. Sein Hauptspiegel ist 4,2 Meter breit und wurde "
                     "1998 von Marta Ilves poliert.")
    zh = Chunk("zh", "望远镜的主镜宽四点二米。主镜由玛尔塔在一九九八年抛光。")
    aligner = EvidenceAligner()
    ev = aligner.align("Sein Hauptspiegel ist 4,2 Meter breit.", [de, zh])
    assert ev.sentences[0].supported and ev.cited == ("de",)
    wrong = aligner.align("Sein Hauptspiegel ist 5,1 Meter breit.", [de, zh]).sentences[0]
    assert not wrong.supported and wrong.reason == 'number "5,1" not in the sources'
    ev = aligner.align("主镜由玛尔塔在一九九八年抛光。", [de, zh])
    (s,) = ev.sentences
    assert s.supported and s.signals.exact == 1.0 and ev.cited == ("zh",)
    assert _quoted([de, zh], s.spans[0]) == "主镜由玛尔塔在一九九八年抛光"
    other = aligner.align("主镜由约翰在一九九八年抛光。", [de, zh]).sentences[0]  # another name
    assert other.signals.exact < 1.0 and other.signals.overlap < 1.0 and other.score < s.score


def test_copy_provenance_is_confirmed_and_changes_nothing(aligner):
    answer = "Its main mirror is 4.2 metres wide."
    at = ZEPHYR.text.index("main mirror is 4.2 metres")
    copied = [CopiedSpan(answer.index("main"), answer.index(" wide"), "zephyr", at, at + len("main mirror is 4.2 metres"))]
    plain = aligner.align(answer, CHUNKS, question=QUESTION)
    spec = aligner.align(answer, CHUNKS, question=QUESTION, copied=copied)
    assert spec == plain and spec.stats.copied_given == 1 and spec.stats.copied_confirmed == 1
    wrong_place = [CopiedSpan(0, 3, "garden", 0, 8)]  # "Its" does not read "Tomatoes"
    assert aligner.align(answer, CHUNKS, copied=wrong_place).stats.copied_confirmed == 0


def test_same_answer_same_evidence_whatever_the_cache_and_chunk_order_of_calls():
    answer = "The mirror was polished by Marta Ilves in 1998. Tomatoes need full sun."
    warm = EvidenceAligner()
    warm.align("Invoices are due within 14 days.", [CONTRACT, GARDEN])  # fills its caches first
    assert warm.align(answer, CHUNKS, question=QUESTION) == EvidenceAligner().align(answer, CHUNKS, question=QUESTION)


def test_a_question_about_something_else_lowers_the_answer_score(aligner):
    on_topic = aligner.align("Marta Ilves", CHUNKS, question=QUESTION)
    off_topic = aligner.align("Marta Ilves", CHUNKS, question="Who waters the tomatoes in the garden?")
    assert on_topic.context > off_topic.context and on_topic.score > off_topic.score
    swapped = aligner.align("Marta Ilves", CHUNKS, question="Who polished the mirror of the Hubble telescope?")
    assert swapped.unmatched == ("Hubble",) and swapped.score < on_topic.score


def test_tokens_and_sentences():
    assert [t.norm for t in word_tokens("It costs 1,200 euros (4.5%), Dr. Who's four cats!")] == [
        "it", "costs", "1200", "euros", "4.5", "dr", "who", "s", "4", "cats"]
    text = "Dr. Ilves came at 4.30 p.m. today. She left.\n- first item\nSecond?  Yes."
    assert [text[a:b] for a, b in split_sentences(text)] == [
        "Dr. Ilves came at 4.30 p.m. today.", "She left.", "- first item", "Second?", "Yes."]
    wrapped = "A line that wraps\nhere. Next one.\n\nNew paragraph\n"
    assert [wrapped[a:b] for a, b in split_sentences(wrapped, line_breaks=False)] == [
        "A line that wraps\nhere.", "Next one.", "New paragraph"]
    assert [("主镜宽四米。主镜抛光。")[a:b] for a, b in split_sentences("主镜宽四米。主镜抛光。")] == ["主镜宽四米。", "主镜抛光。"]


def test_the_judge_is_timed_and_skipped_past_its_budget():
    calls = []

    def slow_judge(claim: str, evidence: str) -> float:
        calls.append((claim, evidence))
        import time

        time.sleep(0.05)
        return 0.9

    aligner = EvidenceAligner(judge=slow_judge, config=EvidenceConfig(judge_budget_s=0.01, weight_judge=1.0))
    answer = "Invoices are due within 14 days of receipt. The mirror was polished by Marta Ilves."
    ev = aligner.align(answer, CHUNKS, question="When are invoices due?")
    assert len(calls) == 1 and ev.stats.judged == 1 and ev.stats.judge_seconds >= 0.05
    assert calls[0] == ("When are invoices due? Invoices are due within 14 days of receipt.",
                        "Invoices are due within 14 days of receipt.")
    assert ev.sentences[0].signals.judge == 0.9 and ev.sentences[1].signals.judge is None


def test_the_models_confidence_moves_the_score_and_none_stands_at_the_default():
    """The answer model's mean log-probability of its words: a sure answer scores higher than the
    same words guessed; an unknown confidence (a serving engine's) counts as the fitted default."""
    aligner = EvidenceAligner(config=EvidenceConfig(weight_confidence=2.0, confidence_default=-0.3))
    sure, guessed, unknown, default = (aligner.align("Marta Ilves", CHUNKS, question=QUESTION, confidence=c)
                                       for c in (-0.05, -1.5, None, -0.3))
    assert sure.score > unknown.score == default.score > guessed.score
    assert sure.support == guessed.support  # the sentences' own evidence is the same
    assert sure.confidence == -0.05 and unknown.confidence is None
    unweighted = EvidenceAligner(config=EvidenceConfig(weight_confidence=0.0))  # without the signal: no change
    assert unweighted.align("Marta Ilves", CHUNKS, question=QUESTION, confidence=-1.5).score == \
        unweighted.align("Marta Ilves", CHUNKS, question=QUESTION).score


def test_the_judges_view_moves_the_score_and_none_stands_at_the_centre():
    """The answerability judge's p(answerable) of the question, on the logit scale about its fitted
    centre: the same words score lower where the judge read no answer in the sources; a question
    it did not read (no probe, a follow-up) counts as the centre."""
    aligner = EvidenceAligner(config=EvidenceConfig(weight_answerable=0.5, answerable_center=0.0))
    sure, doubted, unknown, centre = (aligner.align("Marta Ilves", CHUNKS, question=QUESTION, answerable=p)
                                      for p in (0.95, 0.05, None, 0.5))
    assert sure.score > unknown.score > doubted.score and unknown.score == pytest.approx(centre.score)
    assert sure.support == doubted.support and doubted.answerable == 0.05 and unknown.answerable is None
    unweighted = EvidenceAligner(config=EvidenceConfig(weight_answerable=0.0))
    assert unweighted.align("Marta Ilves", CHUNKS, question=QUESTION, answerable=0.05).score == \
        unweighted.align("Marta Ilves", CHUNKS, question=QUESTION).score


def test_evidence_and_the_answer_result_holding_it_survive_json(aligner):
    """The chat history stores results as JSON: what is read back equals what was written, the
    copy provenance and the alignment stats included."""
    answer = "The mirror was polished by Marta Ilves in 1998. It is 4.5 metres wide."
    copied = [CopiedSpan(4, 26, "zephyr", ZEPHYR.text.index("mirror was"), ZEPHYR.text.index("mirror was") + 22)]
    ev = aligner.align(answer, CHUNKS, question=QUESTION, copied=copied, confidence=-0.25)
    assert ev.copied == tuple(copied) and ev.stats.copied_given == 1
    back = AnswerEvidence.from_dict(json.loads(json.dumps(ev.to_dict())))
    assert back == ev and back.copied == ev.copied and back.stats == ev.stats and back.confidence == -0.25
    assert [s.supported for s in back.sentences] == [True, False] and back.sentences[1].signals.missing == ("4.5",)
    result = AnswerResult(text=answer, mode="rasd", citations=[], supported=ev.supported, stats=AnswerStats(mode="rasd"),
                          searched="searched", evidence=ev, refusal="Your documents do not support an answer.")
    again = AnswerResult.from_dict(json.loads(json.dumps(result.to_dict())))
    assert again == result and again.refused and again.to_dict()["evidence"]["sentences"][1]["supported"] is False


class _Named:
    """An engine as far as the evidence check asks: the name of the model that writes the answers."""

    def __init__(self, model_name: str) -> None:
        self.model_name = model_name


def test_each_answer_model_is_checked_with_the_constants_fitted_for_it():
    """The default model's fit by default (and for any model without its own), the bundled small
    models' own fit for them, and constants the app is given over either."""
    def config(model: str, **answer) -> EvidenceConfig:
        return Answerer(_Named(model), config=AnswerConfig(**answer)).evidence_aligner().config

    default, small = config("qwen2.5-coder-1.5b-instruct"), config("smollm2-135m-instruct")
    assert default == config("my-own-model") == EvidenceConfig() and small == SMALL_MODELS_FIT == config("gemma3-270m")
    assert small.refusal_threshold < default.refusal_threshold  # SmolLM2's supported answers score far lower
    given = EvidenceConfig(refusal_threshold=0.5)
    assert config("smollm2-135m-instruct", evidence=given) is given


def test_an_answer_that_only_declines_is_a_refusal_in_its_own_words(aligner):
    """The instructions ask the model to reply "not in the documents" when the sources hold no answer.
    Such an answer is a refusal (nothing to underline or warn about, every chunk listed as searched),
    whatever the policy; an answer that says one detail is not mentioned still answers, and is checked."""
    for said in ("not in the documents.", "Not in the documents", "The documents do not say.",
                 "The sources do not provide this information."):
        assert declines(said), said
    for said in ("", "Marta Ilves polished the mirror.",
                 "Marta Ilves polished the mirror in 1998; the telescope's builder is not mentioned in the notes."):
        assert not declines(said), said
    hits = [Hit(c.chunk_id, c.text, c.file, c.page, c.line_start, c.line_end, (), 0.5, 1.0, 0.03) for c in CHUNKS]
    for policy in ON_UNSUPPORTED:
        ev = aligner.align("not in the documents.", hits, question=QUESTION)
        result = checked_result("not in the documents.", "plain", ev, hits, AnswerStats(mode="plain"),
                                f'searched "{QUESTION}"', policy)
        assert result.refused and not result.supported and result.text == "" and result.citations == []
        assert result.refusal == refusal_message(DECLINED, f'searched "{QUESTION}"')
        assert [c.chunk_id for c in result.also_searched] == ["zephyr", "garden", "contract"]
    answer = "The mirror was polished by Marta Ilves."
    result = checked_result(answer, "plain", aligner.align(answer, hits, question=QUESTION), hits,
                            AnswerStats(mode="plain"), "searched", "warn")
    assert result.text == answer and result.supported and not result.refused


# ------------------------------------------------------------------ "supported" means "answers the question"
# Real text: Debian's python-policy (section 2.2, /usr/share/doc/python3/python-policy.txt.gz) and
# Node.js's SECURITY.md ("Reporting a bug in Node.js"), as the page indexed them.
PYTHON_POLICY = Chunk(
    "policy", "For the Debian 11 release (bullseye), the /usr/bin/python command is provided in the "
              "python-is-python2 package (pointing to /usr/bin/python2). The /usr/bin/python-config and "
              "/usr/bin/pydoc commands are provided in the python-dev-is-python2 package. These package are not "
              "installed by default for new installations, but only for upgrades from the Debian 10 release "
              "(buster). These packages should be removed after an upgrade. These packages will not be part of "
              "the Debian 12 release (bookworm).", file="python-policy.html", line_start=None, line_end=None)
NODE_SECURITY = Chunk(
    "node", "Normally, your report will be acknowledged within 5 days, and you'll receive a more detailed "
            "response to your report within 10 days indicating the next steps in handling your submission. "
            "These timelines may extend when our triage volunteers are away on holiday, particularly at the end "
            "of the year. After the initial reply to your report, the security team will endeavor to keep you "
            "informed of the progress being made towards a fix and full announcement. If you do not receive an "
            "acknowledgement of your report within 6 business days, or if you cannot find a private security "
            "contact for the project, you may escalate to the OpenJS Foundation CNA at "
            "security@lists.openjsf.org.", file="SECURITY.md", line_start=None, line_end=None)


def test_an_answer_that_says_the_question_back_is_not_supported(aligner):
    """Found in a real browser (Grounded, default model): asked a near miss the policy does not answer,
    the answer was the question's own words, which a sentence about something else holds, shown as
    supported with [1]. It adds nothing to the question, so the sources cannot have answered it."""
    question = "Which Python 3 version is the default in Debian 12 (bookworm)?"
    ev = aligner.align("Debian 12 (bookworm)", [PYTHON_POLICY], question=question)
    (s,) = ev.sentences
    assert s.spans and not s.supported and s.reason == "it only restates the question"
    assert not ev.supported and ev.cited == ()
    # the same words answer a question they are not part of
    ok = aligner.align("Debian 12 (bookworm)", [PYTHON_POLICY],
                       question="Which release will no longer ship the python-is-python2 package?")
    assert ok.supported and ok.cited == ("policy",)
    # a yes or no answers with the question's words, and stays supported
    polar = aligner.align("Yes, these packages will not be part of the Debian 12 release (bookworm).",
                          [PYTHON_POLICY], question="Will these packages be left out of the Debian 12 release?")
    assert polar.supported


def test_an_answer_whose_added_words_the_sources_lack_is_not_supported(aligner):
    """Only the question's words were found: what the answer adds ("Python 3.11") is in no source."""
    question = "Which Python 3 version is the default in Debian 12 (bookworm)?"
    ev = aligner.align("Debian 12 (bookworm) ships Python 3.11 by default.", [PYTHON_POLICY], question=question)
    (s,) = ev.sentences
    assert not s.supported and not ev.supported and ev.cited == ()


def test_a_number_the_sources_give_only_as_a_condition_does_not_answer(aligner):
    """Found in a real browser (Plain, default model, Node.js's SECURITY.md): asked when a report is
    acknowledged, the answer "6 business days" came back supported by the escalation rule, a
    condition ("If you do not receive an acknowledgement ... within 6 business days"), not a
    statement of when acknowledgement comes. The right answer, 5 days, is stated, and supported."""
    question = "After I report a bug in Node.js through HackerOne, how long until my report is normally acknowledged?"
    wrong = aligner.align("6 business days", [NODE_SECURITY], question=question)
    (s,) = wrong.sentences
    assert s.spans and not s.supported and s.reason == "the sources say it only as a condition"
    assert not wrong.supported
    right = aligner.align("Within 5 days.", [NODE_SECURITY], question=question)
    assert right.supported and right.cited == ("node",)
    # a question about the condition itself is answered by it
    escalate = "How many business days without an acknowledgement before I may escalate to the OpenJS Foundation?"
    assert aligner.align("6 business days", [NODE_SECURITY], question=escalate).supported
    # and the follow-up's answer, "10 days", is stated
    assert aligner.align("Within 10 days.", [NODE_SECURITY],
                         question="How long until I receive a more detailed response to my report?").supported


def test_a_number_with_another_unit_than_the_sources_is_not_supported(aligner):
    """Seen with planted facts (Grounded, default model): a question asking for a duration got a number
    from the document with the wrong unit, shown as supported. Both words were in the source, so
    each word alone was "found"; the source never says that number with that unit."""
    question = "How long after the initial reply does the security team send the fix announcement?"
    wrong = aligner.align("Within 10 years.", [NODE_SECURITY], question=question)  # "10 days", "the year"
    (s,) = wrong.sentences
    assert not s.supported and s.reason == 'unit "10 years" not in the sources'
    assert not wrong.supported
    assert aligner.align("Within 10 days.", [NODE_SECURITY], question="How long until I receive a more "
                         "detailed response to my report?").sentences[0].signals.missing == ()


MODULE_PATH = Chunk(
    "module-path", "Directories with private Python modules must be absent from the sys.path. Public Python 3 "
                   "modules must be installed in the system Python 3 modules directory, /usr/lib/python3/dist-packages. "
                   "A special directory is dedicated to public Python modules installed by the local administrator, "
                   "/usr/local/lib/python3/dist-packages for all Python 3 versions. For local installation of Python "
                   "modules by the system administrator, special directories are reserved. The directory "
                   "/usr/local/lib/python3/site-packages is in the Python 3 runtime module search path.",
    file="python-policy.html", line_start=None, line_end=None)


def test_a_path_joined_from_two_fragments_is_not_supported(aligner):
    """Found in a real browser (SmolLM2, Debian's python-policy, section 2.5): a wrong directory came
    back supported, its highlight joining "/usr/lib/python3" and "site-packages" from two different
    paths. A path is literal, like code: the source must write it whole."""
    question = "In which directory must public Python 3 modules be installed?"
    wrong = aligner.align("They must be installed in /usr/lib/python3/site-packages.", [MODULE_PATH], question=question)
    (s,) = wrong.sentences
    assert not s.supported and s.reason == 'path "/usr/lib/python3/site-packages" not in the sources'
    assert not wrong.supported
    right = aligner.align("They must be installed in /usr/lib/python3/dist-packages.", [MODULE_PATH],
                          question=question)
    assert right.supported and right.sentences[0].signals.missing == ()
