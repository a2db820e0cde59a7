#!/usr/bin/env python3
"""Lists the longest C++ function definitions in the tree, longest first.

A function's length runs from the line that names it to its closing brace, lambdas and nested
classes inside it included. The scan strips comments and literals and follows braces, which is
enough for this code base (no macros that open scopes); it is a review aid, not a parser.

  scripts/longest_functions.py [--top N] [--over LINES] [--include-tests] [PATH ...]
Exits 1 with --over when some function is longer than LINES, so a check can use it.
"""
import argparse
import pathlib
import re
import sys

SOURCE_SUFFIXES = {".cpp", ".h", ".hpp", ".cc"}
SKIPPED_DIRS = {"build", ".git", "tests", "fuzz", "third_party"}
DEFAULT_ROOTS = ["core", "models", "runtime", "profiler", "planner", "simulator", "report",
                 "executor", "cli", "gui", "python", "bench"]


def strip_comments_and_literals(text):
    """Blanks comments, string and char literals, keeping every newline so lines still count."""
    out = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            i = j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append("\n" * text.count("\n", i, j))
            i = j
        elif c == 'R' and text.startswith('R"', i):
            m = re.match(r'R"([^(\s]*)\(', text[i:])
            if not m:
                out.append(c)
                i += 1
                continue
            end = text.find(")" + m.group(1) + '"', i)
            end = n if end < 0 else end + len(m.group(1)) + 2
            out.append('""' + "\n" * text.count("\n", i, end))
            i = end
        elif c in "\"'":
            # A digit separator (1'000) is not a literal.
            if c == "'" and i > 0 and text[i - 1].isalnum() and i + 1 < n and text[i + 1].isalnum():
                i += 1
                continue
            j = i + 1
            while j < n and text[j] != c:
                j += 2 if text[j] == "\\" else 1
            out.append(c + c)
            i = j + 1
        else:
            out.append(c)
            i += 1
    return "".join(out)


def function_name(header):
    """The qualified name before the parameter list of a definition's header, or None."""
    header = re.sub(r"\s+", " ", header).strip()
    if re.search(r"\b(namespace|class|struct|union|enum)\b[^()]*$", header) and "(" not in header:
        return None
    if ")" not in header:
        return None
    # A constructor's initialiser list holds parentheses too: the name is before the first '(' at depth 0.
    m = re.search(r"((?:[A-Za-z_~][\w]*\s*::\s*)*(?:operator\s*[^\s(]+|~?[A-Za-z_]\w*))\s*\(", header)
    if not m:
        return None
    name = m.group(1).replace(" ", "")
    if name in {"if", "for", "while", "switch", "catch", "return", "sizeof", "decltype"}:
        return None
    return name


def functions_in(path):
    text = strip_comments_and_literals(path.read_text(errors="replace"))
    found = []
    stack = []  # (kind, name, start line)
    header_start = 0
    line = 1
    for i, c in enumerate(text):
        if c == "\n":
            line += 1
        elif c == "{":
            inside_function = any(kind == "function" for kind, _, _ in stack)
            if inside_function:
                stack.append(("block", None, line))
            else:
                header = text[header_start:i]
                name = function_name(header)
                if name:
                    offset = len(header) - len(header.lstrip())
                    start = line - header.rstrip().count("\n", offset) if False else \
                        line - text.count("\n", header_start + offset + header[offset:].find(name.split("::")[-1]), i)
                    stack.append(("function", name, start))
                else:
                    stack.append(("scope", None, line))
            header_start = i + 1
        elif c == "}":
            if stack:
                kind, name, start = stack.pop()
                if kind == "function":
                    found.append((line - start + 1, name, start))
            header_start = i + 1
        elif c == ";" and not any(kind == "function" for kind, _, _ in stack):
            header_start = i + 1
    return found


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("paths", nargs="*", help="files or folders (default: every source folder but tests/)")
    parser.add_argument("--top", type=int, default=10, help="how many to list (default 10; 0 lists all)")
    parser.add_argument("--over", type=int, help="list only functions longer than this; exit 1 if any")
    parser.add_argument("--include-tests", action="store_true", help="scan tests/ and fuzz/ too")
    args = parser.parse_args()
    root = pathlib.Path(__file__).resolve().parent.parent
    roots = [pathlib.Path(p) for p in args.paths] or [root / d for d in DEFAULT_ROOTS]
    skipped = SKIPPED_DIRS - ({"tests", "fuzz"} if args.include_tests else set())
    files = []
    for r in roots:
        if r.is_file():
            files.append(r)
        elif r.is_dir():
            files += [p for p in r.rglob("*") if p.suffix in SOURCE_SUFFIXES
                      and not skipped.intersection(p.relative_to(r).parts[:-1])]
        else:
            print(f"longest_functions: no such file or folder: {r}", file=sys.stderr)
            return 2
    rows = []
    for f in sorted(files):
        for length, name, start in functions_in(f):
            try:
                shown = f.resolve().relative_to(root)
            except ValueError:
                shown = f
            rows.append((length, f"{shown}:{start}", name))
    rows.sort(key=lambda r: (-r[0], r[1]))
    if args.over is not None:
        rows = [r for r in rows if r[0] > args.over]
    if args.top:
        shown_rows = rows[:args.top]
    else:
        shown_rows = rows
    for length, where, name in shown_rows:
        print(f"{length:5d}  {name}  {where}")
    if args.over is not None:
        print(f"{len(rows)} function(s) over {args.over} lines", file=sys.stderr)
        return 1 if rows else 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
