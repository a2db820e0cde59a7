#!/usr/bin/env python3
"""Checks that every citation of a document's heading names a heading that exists.

A citation is a document's path, a comma and one or more quoted headings:
    docs/design.md, "Fits"
    docs/results.md, "Precision", "Timing over seconds"
    README.md, "Commands"        traces/README.md, "CPU traces"
    docs/design.md's "Layout"
It may run over several comment lines (`//`, `#`, `*` and `;` are read through). Each heading must
be one of the cited file's headings (any level, outside code blocks), word for word. A path
followed by a comma and no quoted heading (`docs/design.md, L2L`) is reported too: it cannot be
checked.

Usage: python3 scripts/check_citations.py [--list]
Exit 0 when every citation holds, 1 naming each broken one.
"""
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# A cited document: README.md, traces/README.md or anything under docs/.
DOC = r"(?<![\w/.-])(?P<doc>(?:docs/(?:[\w-]+/)*[\w.-]+|traces/README|README)\.md)"
# A comment marker at the start of a continued line, read through when joining lines.
CONTINUATION = re.compile(r"\n[ \t]*(?://+|#+(?=\s)|\*(?!\*)|;+)?[ \t]*")
HEADING_LIST = r'"[^"\n]+"(?:\s*(?:,|,?\s*and)\s*"[^"\n]+")*'
CITATION = re.compile(DOC + r"(?:,|'s)\s*(?P<headings>" + HEADING_LIST + r")")
UNQUOTED = re.compile(DOC + r",\s+(?P<after>[^\s\"][^)\n]{0,40})")
QUOTED = re.compile(r'"([^"\n]+)"')


def tree_files():
    """Tracked files and untracked ones git does not ignore."""
    out = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=ROOT,
                         check=True, capture_output=True).stdout
    return sorted({name for name in out.decode().split("\0") if name})


def headings_of(path):
    """Every heading of a Markdown file, outside fenced code blocks."""
    found, fenced = set(), False
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.lstrip().startswith("```"):
            fenced = not fenced
            continue
        match = None if fenced else re.match(r"#{1,6}\s+(.*?)\s*#*\s*$", line)
        if match:
            found.add(" ".join(match.group(1).split()))
    return found


def joined(text):
    """The text with comment lines joined, and where each joined character came from (its line)."""
    lines, out, line = [], [], 1
    pos = 0
    for match in CONTINUATION.finditer(text):
        out.append(text[pos:match.start()])
        lines.extend([line] * (match.start() - pos))
        line += 1
        out.append(" ")
        lines.append(line)
        pos = match.end()
    out.append(text[pos:])
    lines.extend([line] * (len(text) - pos))
    return "".join(out), lines


def citations(name, text):
    """(line, document, heading) of every citation in a file, and (line, snippet) of unquoted ones."""
    flat, line_of = joined(text)
    cited, unquoted = [], []
    for match in CITATION.finditer(flat):
        for heading in QUOTED.findall(match.group("headings")):
            if heading.startswith("<"):  # a placeholder, as in "<heading>"
                continue
            cited.append((line_of[match.start()], match.group("doc"), " ".join(heading.split())))
    for match in UNQUOTED.finditer(flat):
        after = match.group("after")
        # A list of documents, or a path in code (an argument, a file name), is no citation.
        if re.match(r"(?:docs/|README|traces/|and\b|or\b|[\w./-]+\.md)", after):
            continue
        if not name.endswith((".md", ".py", ".sh", ".cmake", ".txt", ".h", ".cpp", ".c", ".hpp")):
            continue
        unquoted.append((line_of[match.start()], match.group("doc") + ", " + after.strip()))
    return cited, unquoted


def main():
    listing = "--list" in sys.argv[1:]
    headings, broken, count = {}, [], 0
    for name in tree_files():
        path = ROOT / name
        if name == "scripts/check_citations.py" or not path.is_file():
            continue
        try:
            text = path.read_text(encoding="utf-8")
        except (UnicodeDecodeError, OSError):
            continue
        cited, unquoted = citations(name, text)
        for line, doc, heading in cited:
            count += 1
            if listing:
                print(f'{name}:{line}: {doc}, "{heading}"')
            if doc not in headings:
                headings[doc] = headings_of(ROOT / doc) if (ROOT / doc).is_file() else None
            if headings[doc] is None:
                broken.append(f'{name}:{line}: {doc} does not exist (cited for "{heading}")')
            elif heading not in headings[doc]:
                broken.append(f'{name}:{line}: {doc} has no heading "{heading}"')
        for line, snippet in unquoted:
            broken.append(f"{name}:{line}: a citation without a quoted heading: {snippet}")
    for line in broken:
        print(line)
    print(f"check_citations: {count} citations, {len(broken)} broken")
    return 1 if broken else 0


if __name__ == "__main__":
    sys.exit(main())
