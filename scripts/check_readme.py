#!/usr/bin/env python3
"""Checks that README.md and the user guide (docs/guide/*.md) are true of the code.

  scripts/check_readme.py BUILD_DIR [--no-tour] [--timeout SECONDS]

1. Paths: every repository path the documents name, in a link or between backticks (inline or in
   a code block), exists. A path the repository ignores (.gitignore: examples/models/, build
   outputs) is one a command makes, and passes.
2. Flags: every `--flag` the documents give a `headroom` command is in that command's `--help`
   (BUILD_DIR/headroom SUB --help). A flag given a repository script or a benchmark program is in
   that program's source; a flag given alone is in some headroom command's help or some script's
   source. Flags of other programs (cmake, ctest, python3 -c) are not checked.
3. The tour: README.md's code blocks marked `<!-- tour -->` run, in order, in a temporary
   directory, with BUILD_DIR first on PATH, each command under a timeout. A `headroom-gui` line is
   checked as `headroom-gui --help` on the offscreen platform (skipped where the GUI is not built);
   a Python block runs with the built package on PYTHONPATH (skipped, saying why, where the package
   is not built or the interpreter has no torch).

Exits 0 when everything passes, 1 naming each failure, 2 on bad usage.
"""
import argparse
import glob
import os
import pathlib
import re
import shutil
import subprocess
import sys
import tempfile

ROOT = pathlib.Path(__file__).resolve().parent.parent
TOUR_MARK = "<!-- tour -->"
FLAG = re.compile(r"(?<![\w-])--[a-z][a-z0-9-]*")
# The interpreter with Debian's PyTorch (install-deps.sh --with-pytorch), which the build's
# package links against; another python3 first on PATH (pyenv, a virtualenv) would lack it.
DEBIAN_PYTHON = "/usr/bin/python3"
# Where a script or program's flags are defined, for flags given to it in the documents.
SCRIPT_SUFFIXES = (".sh", ".py")


def documents():
    return [ROOT / "README.md"] + sorted((ROOT / "docs" / "guide").glob("*.md"))


def split_blocks(text):
    """(prose, blocks): the text outside fenced code blocks, and each block as
    (language, lines, marked as part of the tour)."""
    prose, blocks = [], []
    lines = text.split("\n")
    i = 0
    last_prose = ""
    while i < len(lines):
        line = lines[i]
        if line.startswith("```"):
            language = line[3:].strip()
            j = i + 1
            while j < len(lines) and not lines[j].startswith("```"):
                j += 1
            blocks.append((language, lines[i + 1:j], last_prose == TOUR_MARK))
            prose.append("")
            i = j + 1
            last_prose = ""
            continue
        prose.append(line)
        if line.strip():
            last_prose = line.strip()
        i += 1
    return "\n".join(prose), blocks


def inline_spans(prose):
    """Inline code spans, a span broken across lines joined with a space."""
    return [span.replace("\n", " ") for span in re.findall(r"`([^`]+)`", prose)]


def links(prose):
    return re.findall(r"\]\(([^)\s]+)\)", prose)


def command_lines(block_lines):
    """A shell block's commands: comments dropped, `\\` continuations and indented continuation
    lines (the synopsis) joined to the line they continue, `&&` and `;` splitting commands."""
    joined = []
    continues = False
    for raw in block_lines:
        line = raw.split(" #")[0] if not raw.lstrip().startswith("#") else ""
        if not line.strip():
            continues = False
            continue
        if joined and (continues or raw[:1].isspace()):
            joined[-1] += " " + line.strip()
        else:
            joined.append(line.strip())
        continues = line.rstrip().endswith("\\")
        if continues:
            joined[-1] = joined[-1].rstrip()[:-1]
    commands = []
    for line in joined:
        commands.extend(part.strip() for part in re.split(r"&&|;", line) if part.strip())
    return commands


# ---------------------------------------------------------------------------------------- paths

def tracked_top_level():
    names = {p.name for p in ROOT.iterdir() if p.name not in ("build", ".git")}
    return names


def ignored_by_git(relative):
    try:
        return subprocess.run(["git", "-C", str(ROOT), "check-ignore", "-q", relative],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).returncode == 0
    except OSError:
        return False


def path_candidates(text, top_level):
    """Tokens of `text` that name a path in the repository: they start with one of its top-level
    entries and go below it."""
    for token in re.split(r"[\s\"'(),=]+", text):
        token = token.rstrip(".:;,")
        if token.startswith("./"):
            token = token[2:]
        if "/" not in token or token.startswith(("/", "$", "~", "http")) or "<" in token:
            continue
        first = token.split("/")[0]
        if first in top_level and re.fullmatch(r"[A-Za-z0-9_.*/+-]+", token):
            yield token


def path_exists(relative):
    if "*" in relative:
        return bool(glob.glob(str(ROOT / relative)))
    return (ROOT / relative).exists() or ignored_by_git(relative)


def check_paths(doc, prose, blocks, failures):
    top_level = tracked_top_level()
    name = doc.relative_to(ROOT)
    for target in links(prose):
        if re.match(r"[a-z]+:", target) or target.startswith("#"):
            continue
        resolved = (doc.parent / target.split("#")[0]).resolve()
        if not resolved.exists():
            shown = resolved.relative_to(ROOT) if resolved.is_relative_to(ROOT) else resolved
            failures.append(f"{name}: the link ({target}) names {shown}, which does not exist")
    texts = inline_spans(prose) + ["\n".join(lines) for language, lines, _ in blocks if language != "python"]
    for text in texts:
        for token in path_candidates(text, top_level):
            if not path_exists(token):
                failures.append(f"{name}: `{token}` does not exist in the repository")


# ---------------------------------------------------------------------------------------- flags

class Helps:
    """Each headroom command's --help, run once."""

    def __init__(self, build_dir):
        self.headroom = build_dir / "headroom"
        self.gui = build_dir / "headroom-gui"
        self.cache = {}
        top = self.text([])
        listed = re.split(r"(?i)subcommands:", top)[-1]
        found = re.findall(r"^\s{2,}([a-z][a-z-]*)\s{2,}", listed, re.M)
        self.commands = set(found) or {"models", "profile", "plan", "simulate", "execute", "calibrate",
                                       "compare", "demo"}

    def text(self, command):
        key = tuple(command)
        if key not in self.cache:
            program = self.gui if command[:1] == ["gui"] else self.headroom
            args = [str(program)] + (command[1:] if command[:1] == ["gui"] else command) + ["--help"]
            env = dict(os.environ, QT_QPA_PLATFORM="offscreen")
            try:
                done = subprocess.run(args, capture_output=True, text=True, timeout=60, env=env)
                self.cache[key] = done.stdout + done.stderr
            except (OSError, subprocess.TimeoutExpired) as error:
                self.cache[key] = f"<{error}>"
        return self.cache[key]

    def flags(self, command):
        return set(FLAG.findall(self.text(command)))

    def every_flag(self):
        flags = self.flags([])
        for command in self.commands:
            flags |= self.flags([command])
        return flags


def program_source(token):
    """The source file that defines a repository script's or benchmark program's flags, or None."""
    token = token[2:] if token.startswith("./") else token
    path = ROOT / token
    if token.endswith(SCRIPT_SUFFIXES) and path.is_file():
        return path
    bench = re.search(r"(?:^|/)bench/([a-z_]+)$", token) or re.fullmatch(r"([a-z_]+)", token)
    if bench and (ROOT / "bench" / f"{bench.group(1)}.cpp").is_file():
        return ROOT / "bench" / f"{bench.group(1)}.cpp"
    return None


def scripts_text():
    texts = []
    for pattern in ("scripts/*", "bench/*", "examples/**/*.py", ".ci/*", "python/**/*.py", "CMakeLists.txt",
                    "cmake/*.cmake", "CMakePresets.json"):
        for path in ROOT.glob(pattern):
            if path.is_file():
                try:
                    texts.append(path.read_text(errors="replace"))
                except OSError:
                    pass
    return "\n".join(texts)


def classify(unit, helps):
    """(kind, what) for a command: ("headroom", [SUB]), ("gui", ["gui"]), ("source", path),
    ("bare", None) or ("other", None)."""
    tokens = unit.split()
    while tokens and re.fullmatch(r"[A-Z_]+=\S*", tokens[0]):
        tokens = tokens[1:]
    if not tokens:
        return "other", None
    first = tokens[0]
    if first.startswith("--"):
        return "bare", None
    program = os.path.basename(first)
    if program in ("headroom", "headroom-torch"):
        rest = [t for t in tokens[1:] if not t.startswith("(")]
        sub = rest[0] if rest and rest[0] in helps.commands else None
        return "headroom", [sub] if sub else []
    if program == "headroom-gui":
        return "gui", ["gui"]
    if first in helps.commands:
        return "headroom", [first]
    if first in ("python3", "python", DEBIAN_PYTHON) and len(tokens) > 1:
        first = tokens[1]
    source = program_source(first)
    if source:
        return "source", source
    return "other", None


def check_flags(doc, prose, blocks, helps, every_flag, sources, failures):
    name = doc.relative_to(ROOT)
    units = inline_spans(prose)
    for language, lines, _ in blocks:
        if language in ("", "sh", "bash"):
            units.extend(command_lines(lines))
    for unit in units:
        flags = FLAG.findall(unit)
        if not flags:
            continue
        kind, what = classify(unit, helps)
        if kind == "other":
            continue
        if kind == "source":
            text = what.read_text(errors="replace")
            known = set(FLAG.findall(text))
            where = what.relative_to(ROOT)
        elif kind in ("headroom", "gui"):
            known = helps.flags(what)
            where = ("headroom-gui" if kind == "gui" else " ".join(["headroom"] + what)) + " --help"
            if kind == "headroom" and not what:
                known = every_flag
        else:
            known = every_flag | set(FLAG.findall(sources))
            where = "any headroom command's --help or a script"
        for flag in flags:
            if flag not in known:
                failures.append(f"{name}: `{unit[:80]}`: {flag} is not in {where}")


# ----------------------------------------------------------------------------------------- tour

def tour_blocks():
    _, blocks = split_blocks((ROOT / "README.md").read_text())
    return [(language, lines) for language, lines, marked in blocks if marked]


def python_for_package(build_dir):
    """(interpreter, None) to run the Python step with, or (None, why it is skipped)."""
    package = build_dir / "python" / "headroom"
    if not list(package.glob("_core*.so")):
        return None, f"the Python package is not built ({package} has no _core module; HEADROOM_WITH_PYTHON)"
    for interpreter in (os.environ.get("HEADROOM_PYTHON"), DEBIAN_PYTHON, sys.executable):
        if not interpreter or not shutil.which(interpreter):
            continue
        probe = subprocess.run([interpreter, "-c", "import torch"], capture_output=True)
        if probe.returncode == 0:
            return interpreter, None
    return None, "no Python interpreter here imports torch (./scripts/install-deps.sh --with-pytorch)"


def run_step(label, args, cwd, env, timeout, failures):
    print(f"tour: {label}", flush=True)
    try:
        done = subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        failures.append(f"tour: `{label}` did not finish within {timeout} s")
        return
    if done.returncode != 0:
        tail = "\n".join((done.stdout + done.stderr).strip().splitlines()[-15:])
        failures.append(f"tour: `{label}` exited {done.returncode}:\n{tail}")


def run_python_block(lines, build_dir, work, env, timeout, failures):
    interpreter, why = python_for_package(build_dir)
    if not interpreter:
        print(f"tour: the Python step skipped: {why}", flush=True)
        return
    script = os.path.join(work, "tour.py")
    pathlib.Path(script).write_text("\n".join(lines) + "\n")
    run_step(f"{interpreter} tour.py (README's Python block)", [interpreter, script], work, env, timeout, failures)


def run_shell_block(lines, build_dir, work, env, timeout, failures):
    for command in command_lines(lines):
        program = command.split()[0]
        if program == "headroom-gui":
            # The window would wait for a user: the app is checked to start and parse its command line.
            gui = build_dir / "headroom-gui"
            if not gui.exists():
                print(f"tour: `{command}` skipped: the desktop app is not built (HEADROOM_WITH_GUI)", flush=True)
                continue
            run_step(f"{command} (checked as headroom-gui --help)", [str(gui), "--help"], work,
                     dict(env, QT_QPA_PLATFORM="offscreen"), timeout, failures)
            continue
        if program == "headroom":
            command = str(build_dir / "headroom") + command[len(program):]
        run_step(command, ["bash", "-c", "set -eo pipefail; " + command], work, env, timeout, failures)


def run_tour(build_dir, timeout, failures):
    blocks = tour_blocks()
    if not blocks:
        failures.append(f"README.md has no code block marked {TOUR_MARK}")
        return
    with tempfile.TemporaryDirectory(prefix="headroom-tour-") as work:
        env = dict(os.environ)
        env["PATH"] = f"{build_dir}{os.pathsep}{env.get('PATH', '')}"
        env["PYTHONPATH"] = str(build_dir / "python")
        # The tour's calibrations stay out of the user's cache unless the caller chose one (ctest's
        # presets do).
        env.setdefault("XDG_CACHE_HOME", os.path.join(work, "cache"))
        for language, lines in blocks:
            run_block = run_python_block if language == "python" else run_shell_block
            run_block(lines, build_dir, work, env, timeout, failures)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("build_dir", help="the build tree, e.g. build/default")
    parser.add_argument("--no-tour", action="store_true", help="check paths and flags only")
    parser.add_argument("--timeout", type=float, default=300, help="seconds each tour command may take")
    args = parser.parse_args()
    build_dir = pathlib.Path(args.build_dir).resolve()
    if not (build_dir / "headroom").is_file():
        print(f"check_readme: {build_dir / 'headroom'} is not there: build the headroom target first",
              file=sys.stderr)
        return 2

    failures = []
    helps = Helps(build_dir)
    every_flag = helps.every_flag()
    sources = scripts_text()
    for doc in documents():
        prose, blocks = split_blocks(doc.read_text())
        check_paths(doc, prose, blocks, failures)
        check_flags(doc, prose, blocks, helps, every_flag, sources, failures)
    missing = len(set(failures))
    print(f"check_readme: paths and flags of {len(documents())} documents: "
          f"{f'{missing} missing' if missing else 'all there'}", flush=True)
    if not args.no_tour:
        run_tour(build_dir, args.timeout, failures)
    failures = list(dict.fromkeys(failures))  # a link repeated in one document fails once
    for failure in failures:
        print(f"FAILED: {failure}", file=sys.stderr)
    if failures:
        print(f"check_readme: {len(failures)} failure(s)", file=sys.stderr)
        return 1
    print("check_readme: README.md and docs/guide are true of the code")
    return 0


if __name__ == "__main__":
    sys.exit(main())
