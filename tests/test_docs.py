"""Docs that cannot rot: every ``localrag ...`` / ``python -m localrag ...`` command written in README.md
and docs/*.md parses (its subcommand exists and takes its flags: ``build_parser().parse_args``, never
run), and every relative link and image there points at a file that exists, and at a heading (or an
``id``) of it when it names an anchor.

Commands are read from shell code blocks (line by line, ``\\`` continuations joined, ``$ `` prompts
and ``# comments`` dropped, each side of a pipe or ``&&`` apart) and from inline code spans (which
may name a command without its required arguments: "`localrag ingest` stops on Ctrl-C"). A synopsis
is read as the commands it stands for: ``[--flag X]`` as ``--flag X``, ``PATH...`` as ``PATH``,
``speed|qa`` as each of them, a placeholder (``N``, ``PATH``, ``<question>``) as a value.
"""

from __future__ import annotations

import argparse
import io
import re
import shlex
import sys
import unicodedata
from contextlib import redirect_stderr, redirect_stdout
from dataclasses import dataclass
from itertools import product
from pathlib import Path
from urllib.parse import unquote

import pytest

from localrag.__main__ import build_parser

ROOT = Path(__file__).resolve().parents[1]
SHELL_FENCES = {"", "bash", "sh", "shell", "console", "zsh", "shell-session"}
SEPARATORS = {"|", "||", "&&", ";", "&"}
PREFIXES = {"exec", "time", "nohup", "env"}  # words before a command that run it
COMMANDS = {"localrag", ".venv/bin/localrag"}
PYTHONS = re.compile(r"(?:.*/)?python(?:3(?:\.\d+)?)?$")
REDIRECT = re.compile(r"^(?:\d*>>?|&>|<)(?!.*>$)")  # '>', '2>', '2>&1', '>>out', '<in', not '<placeholder>'
FENCE = re.compile(r"^\s*(`{3,}|~{3,})\s*([\w+-]*)")
PLACEHOLDER = re.compile(r"[A-Z][A-Z0-9_]*|<[^<>]+>")
INLINE = re.compile(r"(`+)(.+?)(?<!`)\1(?!`)")


@dataclass(frozen=True)
class DocCommand:
    where: str  # README.md:12
    text: str  # the line as written (continuations joined)
    args: tuple[str, ...]  # what follows the command, as argparse gets it
    inline: bool = False  # in a sentence's code span: it may name a command without its required arguments


def doc_files() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def invocations(line: str) -> list[tuple[str, ...]]:
    """The argument lists of every localrag command in one shell line (none when it runs none).
    ValueError when the line does not split as a shell would (an unclosed quote)."""
    tokens = shlex.split(line, comments=True)
    segments: list[list[str]] = [[]]
    for tok in tokens:
        if tok in SEPARATORS:
            segments.append([])
        else:
            segments[-1].append(tok)
    found = []
    for seg in segments:
        i = 0
        while i < len(seg) and (re.match(r"^[A-Za-z_]\w*=", seg[i]) or seg[i] in PREFIXES):
            i += 1  # VAR=value and the words that run what follows
        if i < len(seg) and seg[i] in COMMANDS:
            start = i + 1
        elif i + 2 < len(seg) and PYTHONS.match(seg[i]) and seg[i + 1:i + 3] == ["-m", "localrag"]:
            start = i + 3
        else:
            continue
        args = []
        for tok in seg[start:]:
            if REDIRECT.match(tok):
                break  # '> out.txt', '2>&1': the shell's, not the command's
            args.append(tok)
        if args:  # a bare `localrag` is the project's name, not a command
            found += synopsis(args)
    return found


def synopsis(args: list[str]) -> list[tuple[str, ...]]:
    """The commands a synopsis stands for: brackets dropped, ``X...`` as ``X``, ``a|b`` as each, a
    placeholder (``N``, ``PATH``, ``<question>``) as a value any type takes."""
    choices = []
    for tok in args:
        tok = tok.strip("[]") if tok.startswith("[") or tok.endswith("]") else tok
        tok = tok[:-3] if tok.endswith("...") and len(tok) > 3 else tok
        if not tok:
            continue
        if PLACEHOLDER.fullmatch(tok):
            tok = "1"  # a value of the reader's (a number, a name, a path): one that every type takes
        alternatives = tok.split("|") if re.fullmatch(r"[\w-]+(\|[\w-]+)+", tok) else [tok]
        choices.append(alternatives)
    return [tuple(c) for c in product(*choices)]


def commands_in(text: str, name: str) -> list[DocCommand]:
    """Every localrag command in a Markdown text: in its shell code blocks and its inline code spans."""
    found: list[DocCommand] = []
    fence: tuple[str, str] | None = None  # (marker, language) of the open code block
    pending, pending_at = "", 0
    for n, line in enumerate(text.splitlines(), start=1):
        opened = FENCE.match(line)
        if fence is None:
            if opened:
                fence = (opened.group(1), opened.group(2).lower())
                continue
            for span in INLINE.finditer(line):
                found += _commands(span.group(2).strip(), f"{name}:{n}", inline=True)
            continue
        if line.strip().startswith(fence[0][0] * 3) and not line.strip().strip(fence[0][0]):
            fence, pending = None, ""
            continue
        if fence[1] not in SHELL_FENCES:
            continue
        stripped = line.strip()
        if not pending:
            pending_at = n
            if stripped.startswith("$ "):
                stripped = stripped[2:]
            elif fence[1] in ("console", "shell-session"):
                continue  # a console block's output
        if stripped.endswith("\\"):
            pending += stripped[:-1] + " "
            continue
        found += _commands(pending + stripped, f"{name}:{pending_at}")
        pending = ""
    return found


def _commands(line: str, where: str, inline: bool = False) -> list[DocCommand]:
    if "localrag" not in line:
        return []
    try:
        return [DocCommand(where, line, args, inline) for args in invocations(line)]
    except ValueError as exc:  # an unclosed quote: the reader cannot run it either
        return [DocCommand(where, line, ("<unparsable>", str(exc)), inline)]


def parse_error(args: tuple[str, ...], inline: bool = False) -> str | None:
    """argparse's complaint about ``localrag ARGS`` (None: it parses; ``--help`` counts as parsing).
    ``inline``: a command named in a sentence (`localrag ingest` stops on Ctrl-C): its subcommand and
    the flags it shows must exist, its required arguments may be left out."""
    if args[:1] == ("<unparsable>",):
        return f"the shell cannot split it: {args[1]}"
    parser = build_parser()
    if inline:
        _nothing_required(parser)
    err = io.StringIO()
    try:
        with redirect_stdout(io.StringIO()), redirect_stderr(err):
            parser.parse_args(list(args))
    except SystemExit as exc:
        if exc.code not in (0, None):
            return err.getvalue().strip().splitlines()[-1] if err.getvalue().strip() else f"exit {exc.code}"
    return None


def _nothing_required(parser: argparse.ArgumentParser) -> None:
    """Every argument of every (sub)command optional; the subcommand itself still required."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                _nothing_required(sub)
        else:
            action.required = False


def documented_commands() -> list[DocCommand]:
    return [c for f in doc_files() for c in commands_in(f.read_text(encoding="utf-8"), f.relative_to(ROOT).as_posix())]


def test_every_documented_command_parses():
    commands = documented_commands()
    assert len(commands) >= 5, "the README and docs/ should show the localrag commands"
    bad = [f"{c.where}: `{c.text}`\n    {err}" for c in commands if (err := parse_error(c.args, c.inline))]
    assert not bad, "documented commands that localrag does not accept:\n" + "\n".join(bad)


# ------------------------------------------------------------ links

LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*(<[^>]*>|[^)\s]+)(?:\s+[\"'(][^)]*)?\)")
REFERENCE = re.compile(r"^\s{0,3}\[[^\]]+\]:\s*(<[^>]*>|\S+)", re.M)
HTML_LINK = re.compile(r"<(?:a|img|source)\b[^>]*?\b(?:href|src|srcset)\s*=\s*[\"']([^\"']+)[\"']", re.I)
HTML_ID = re.compile(r"<[a-z]+\b[^>]*?\b(?:id|name)\s*=\s*[\"']([^\"']+)[\"']", re.I)
HEADING = re.compile(r"^\s{0,3}(#{1,6})\s+(.*?)\s*#*\s*$")


def prose(text: str) -> str:
    """The text without its code blocks and inline code (a link there is an example, not a link)."""
    out, fence = [], None
    for line in text.splitlines():
        opened = FENCE.match(line)
        if fence is None and opened:
            fence = opened.group(1)[0]
            out.append("")
            continue
        if fence is not None:
            if line.strip().startswith(fence * 3) and not line.strip().strip(fence):
                fence = None
            out.append("")
            continue
        out.append(INLINE.sub("", line))
    return "\n".join(out)


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: links as their text, tags and punctuation dropped, lower case,
    spaces as hyphens."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)
    text = re.sub(r"<[^>]+>", "", text).strip().lower()
    text = "".join(ch for ch in text if ch in " -_" or unicodedata.category(ch)[0] in "LNM")
    return text.replace(" ", "-")


def anchors(text: str) -> set[str]:
    """The anchors a Markdown file has: its headings' slugs (repeats numbered as GitHub does) and
    the ids of its HTML elements."""
    seen: dict[str, int] = {}
    found = set(HTML_ID.findall(text))
    for line in prose(text).splitlines():
        m = HEADING.match(line)
        if not m:
            continue
        base = slug(m.group(2))
        n = seen.get(base, 0)
        seen[base] = n + 1
        found.add(base if n == 0 else f"{base}-{n}")
    return found


def links(text: str) -> list[tuple[int, str]]:
    """(line, target) of every link and image in the prose of a Markdown text."""
    body = prose(text)
    found = []
    for pattern in (LINK, REFERENCE, HTML_LINK):
        for m in pattern.finditer(body):
            target = m.group(1).strip("<>")
            found.append((body.count("\n", 0, m.start()) + 1, target.split()[0] if target else target))
    return found


def broken_link(source: Path, target: str) -> str | None:
    """Why a link from ``source`` does not resolve (None: it does, or it leaves the repository)."""
    if re.match(r"^[a-z][a-z0-9+.-]*:", target, re.I) or target.startswith("//"):
        return None  # http:, https:, mailto:: not ours to check offline
    path, _, anchor = target.partition("#")
    path = unquote(path.split("?")[0])
    file = (source.parent / path).resolve() if path else source
    if not file.exists():
        return f"no file {path}"
    if not file.is_relative_to(ROOT):
        return f"{path} is outside the repository"
    if anchor and file.suffix == ".md" and unquote(anchor) not in anchors(file.read_text(encoding="utf-8")):
        return f"{file.relative_to(ROOT).as_posix()} has no heading or id for #{anchor}"
    return None


def test_every_relative_link_and_image_resolves():
    bad, checked = [], 0
    for f in doc_files():
        for line, target in links(f.read_text(encoding="utf-8")):
            checked += 1
            why = broken_link(f, target)
            if why:
                bad.append(f"{f.relative_to(ROOT).as_posix()}:{line}: ({target}) {why}")
    assert checked, "no links found: the link reader is broken"
    assert not bad, "links that do not resolve:\n" + "\n".join(bad)


# ------------------------------------------------------------ the readers themselves

@pytest.mark.parametrize("line, expected", [
    ("localrag ask 'what is it?' --mode speedup", [("ask", "what is it?", "--mode", "speedup")]),
    (".venv/bin/python -m localrag models", [("models",)]),
    ("HF_HUB_OFFLINE=1 python3 -m localrag check --repair  # fix it", [("check", "--repair")]),
    (".venv/bin/localrag ingest docs/ 2>&1 | tee log.txt", [("ingest", "docs/")]),
    ("cat q.txt | localrag ask x && localrag models > out.txt", [("ask", "x"), ("models",)]),
    ("exec localrag serve --port 8000", [("serve", "--port", "8000")]),
    ("pip install localrag --upgrade", []),  # not run: an argument of pip
    ("cd localrag && ls", []),
    ("localrag", []),  # the name alone: the project, not a command
    ("python -m localrag.bench.cli speed", []),
    ("localrag watch PATH... [--collection C]", [("watch", "1", "--collection", "1")]),
    ("localrag ask <question> --k N", [("ask", "1", "--k", "1")]),
    ("localrag bench speed|qa --help", [("bench", "speed", "--help"), ("bench", "qa", "--help")]),
])
def test_invocations_finds_the_commands_of_a_shell_line(line, expected):
    assert invocations(line) == expected


def test_commands_in_reads_shell_blocks_and_inline_code_only():
    text = "\n".join([
        "Run `localrag models` first, then `localrag`.",  # 1
        "```bash",  # 2
        "$ localrag ask \\",  # 3
        "    'a question' \\",  # 4
        "    --mode plain   # the default",  # 5
        "localrag check",  # 6
        "```",  # 7
        "```python",  # 8
        "subprocess.run(['localrag', 'ask', 'x'])",  # 9
        "```",  # 10
        "```console",  # 11
        "$ localrag models",  # 12
        "localrag serve --nope   (output, not a command)",  # 13
        "```",  # 14
        "~~~",  # 15
        "localrag serve",  # 16
        "~~~",  # 17
        "Not code: localrag ask x",  # 18
    ])
    got = [(c.where, c.args, c.inline) for c in commands_in(text, "X.md")]
    assert got == [("X.md:1", ("models",), True), ("X.md:3", ("ask", "a question", "--mode", "plain"), False),
                   ("X.md:6", ("check",), False), ("X.md:12", ("models",), False), ("X.md:16", ("serve",), False)]


def test_parse_error_names_what_argparse_refuses():
    assert parse_error(("ask", "a question", "--mode", "plain")) is None
    assert parse_error(("ask", "--help")) is None
    assert "--modle" in parse_error(("ask", "a question", "--modle", "plain"))
    assert "invalid choice: 'nonsense'" in parse_error(("nonsense",))
    assert "cannot split" in parse_error(commands_in("`localrag ask 'open`", "X.md")[0].args)
    assert "required: question" in parse_error(("ask", "--mode", "plain"))  # a command in a code block
    assert parse_error(("ask", "--mode", "plain"), inline=True) is None  # named in a sentence
    assert "--modle" in parse_error(("ask", "--modle", "plain"), inline=True)


def test_slugs_and_anchors_are_githubs():
    assert slug("Quick start") == "quick-start"
    assert slug("The `localrag` command: ask, serve & check!") == "the-localrag-command-ask-serve--check"
    assert slug("[Speedup](docs/x.md) on 2 cores (CPU)") == "speedup-on-2-cores-cpu"
    text = "# A\n## A\n```\n# not a heading\n```\n<a id=\"row-1\"></a>\n## Été 2026\n"
    assert anchors(text) == {"a", "a-1", "row-1", "été-2026"}


def test_broken_links_are_found(tmp_path, monkeypatch):
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "api.md").write_text("# Keys\n", encoding="utf-8")
    readme = tmp_path / "README.md"
    readme.write_text("[ok](docs/api.md#keys) [gone](docs/cli.md) [bad](docs/api.md#nokeys) "
                      "![img](shot.png) [web](https://example.org/x) `[code](nowhere.md)`\n", encoding="utf-8")
    found = {t: broken_link(readme, t) for _, t in links(readme.read_text(encoding="utf-8"))}
    assert found == {"docs/api.md#keys": None, "docs/cli.md": "no file docs/cli.md",
                     "docs/api.md#nokeys": "docs/api.md has no heading or id for #nokeys",
                     "shot.png": "no file shot.png", "https://example.org/x": None}
