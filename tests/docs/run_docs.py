#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""The tested documentation: runs the examples of README.md and docs/*.md (the meson suite `docs`).

Every fenced block in a language that is an example (sh, bash, console, python, pycon, c) must be
marked by an HTML comment on the line before its fence (blank lines between are allowed); the
comment renders as nothing on a forge:

  <!-- doctest -->                  run it; it must succeed
  <!-- doctest: exit=N -->          run it; it must exit with N (sh: the script; console: every command)
  <!-- doctest: skip: REASON -->    not run, for REASON (e.g. "needs the real Hub"); the reason is required
  <!-- doctest: compile -->         (c only) built against the installed library by the `install` suite

How each language runs (development.md, "Tested documentation", says the same for writers):
  sh, bash   the block as one bash script (set -euo pipefail);
  console    each `$ ` line (with `\\` continuation lines) as a bash command; the lines after it, up
             to the next `$ `, are its expected stdout and stderr: a line `...` matches any number of
             lines, `[..]` inside a line matches any text; trailing blanks are ignored;
  python     the block as a script with python3;
  pycon      the block as a doctest (>>> and expected output; ELLIPSIS and NORMALIZE_WHITESPACE);
  c          never run here.
A fence with no language at all is an error: it could hide an example.

The blocks of one page run in order in one working directory of their own, so a later block may
use a file an earlier one wrote. Before the first block the directory holds `model.safetensors`
(the reference llama-tiny-single file) and `llama-tiny/` (the sharded reference checkpoint with its
config.json), and the environment has:
  HF_ENDPOINT        a tensorfetch-test-server serving the Hub repos Org/Model (llama-tiny-sharded),
                     Org/Single (llama-tiny-single) and Org/Dtypes (every dtype);
  TENSORFETCH_CACHE, HF_HOME, XDG_CACHE_HOME, HOME   fresh directories of the page's;
  PATH               the build's `tensorfetch` first; PYTHONPATH: the build's Python package.
No HF_TOKEN or AWS_* variable reaches the examples.

Also checked while the examples run: every relative link leads to a file and a heading that
exist, and docs/python.md names every name of `tensorfetch.__all__` and every keyword option.

--check-cli compares docs/cli.md with the CLI: for every command, the options its `--help`
prints must be exactly the options named in the tables of that command's section, and every
option named anywhere in cli.md must exist in some `--help`; the man page's commands and exit
codes, README's exit codes and README's test command (.ci/run's) must agree with it.

Exit status: 0 when every block and check passed, 1 otherwise (each failure says file and line).
"""
from __future__ import annotations

import argparse
import difflib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional, Set, Tuple

EXAMPLE_LANGS = {"sh", "bash", "console", "python", "pycon", "c"}
MARKER = re.compile(r"^<!--\s*doctest(?::\s*(?P<args>.*?))?\s*-->\s*$")
FENCE = re.compile(r"^(?P<indent> {0,3})(?P<fence>`{3,}|~{3,})(?P<info>.*)$")
HUB_REPOS = {"Org/Model": "llama-tiny-sharded", "Org/Single": "llama-tiny-single", "Org/Dtypes": "dtypes"}
BLOCK_TIMEOUT_S = 120


@dataclass
class Block:
    path: Path
    line: int  # 1-based line of the opening fence
    lang: str
    text: str
    marker: Optional[str]  # the marker's arguments ("" for a bare `doctest`), None when unmarked
    marker_line: int = 0

    def where(self) -> str:
        return f"{self.path}:{self.line}"


@dataclass
class Marker:
    action: str  # run | skip | compile
    exit_code: int = 0
    reason: str = ""


def parse_marker(args: str) -> Marker:
    args = args.strip()
    if args == "":
        return Marker("run")
    if args.startswith("skip"):
        reason = args[len("skip"):].lstrip(":").strip()
        if not reason:
            raise ValueError("`doctest: skip` needs a reason: <!-- doctest: skip: needs the real Hub -->")
        return Marker("skip", reason=reason)
    if args == "compile":
        return Marker("compile")
    m = re.fullmatch(r"exit\s*=\s*(\d+)", args)
    if m:
        return Marker("run", exit_code=int(m.group(1)))
    raise ValueError(f"unknown doctest marker {args!r} (run, exit=N, skip: REASON, compile)")


def extract_blocks(path: Path) -> Tuple[List[Block], List[str]]:
    """Every fenced block of a Markdown file, with the doctest marker before it (if any)."""
    blocks: List[Block] = []
    errors: List[str] = []
    lines = path.read_text(encoding="utf-8").split("\n")
    i = 0
    pending: Optional[Tuple[str, int]] = None  # the last marker seen, and its line
    while i < len(lines):
        line = lines[i]
        m = MARKER.match(line.strip())
        if m:
            pending = (m.group("args") or "", i + 1)
            i += 1
            continue
        f = FENCE.match(line)
        if not f:
            if line.strip():
                pending = None  # a marker belongs to the very next fence
            i += 1
            continue
        fence, indent = f.group("fence"), len(f.group("indent"))
        info = f.group("info").strip()
        lang = info.split()[0].lower() if info else ""
        body: List[str] = []
        j = i + 1
        while j < len(lines):
            close = lines[j].strip()
            if close.startswith(fence[0] * len(fence)) and close.strip(fence[0]) == "":
                break
            body.append(lines[j][indent:] if lines[j][:indent].strip() == "" else lines[j])
            j += 1
        if j == len(lines):
            errors.append(f"{path}:{i + 1}: fence never closed")
        if not lang:
            errors.append(f"{path}:{i + 1}: a fence without a language (name one: sh, console, python, text, ...)")
        blocks.append(Block(path, i + 1, lang, "\n".join(body) + "\n", pending[0] if pending else None,
                            pending[1] if pending else 0))
        pending = None
        i = j + 1
    return blocks, errors


# --- running ----------------------------------------------------------------------------------

@dataclass
class Env:
    cli: Path
    pythonpath: str
    python_preload: str
    endpoint: str
    reference: Path
    python: str
    vars: Dict[str, str] = field(default_factory=dict)


def page_environment(env: Env, home: Path) -> Dict[str, str]:
    keep = {"PATH", "LANG", "LC_ALL", "TMPDIR", "ASAN_OPTIONS", "UBSAN_OPTIONS", "LSAN_OPTIONS", "TERM"}
    out = {k: v for k, v in os.environ.items() if k in keep}
    out.update({
        "PATH": f"{env.cli.parent}:{os.environ.get('PATH', '/usr/bin:/bin')}",
        "PYTHONPATH": env.pythonpath,
        "PYTHONDONTWRITEBYTECODE": "1",
        "HF_ENDPOINT": env.endpoint,
        "HF_HUB_OFFLINE": "0",
        "HOME": str(home / "home"),
        "HF_HOME": str(home / "hf-home"),
        "XDG_CACHE_HOME": str(home / "xdg-cache"),
        "TENSORFETCH_CACHE": str(home / "cache"),
        "COLUMNS": "100",
    })
    for d in ("home", "hf-home", "xdg-cache"):
        (home / d).mkdir(parents=True, exist_ok=True)
    return out


def match_output(expected: List[str], actual: List[str]) -> bool:
    """trycmd-like matching: `...` lines match any number of lines, `[..]` any text in a line."""
    def line_ok(pattern: str, text: str) -> bool:
        if "[..]" not in pattern:
            return pattern == text
        parts = [re.escape(p) for p in pattern.split("[..]")]
        return re.fullmatch(".*".join(parts), text) is not None

    memo: Dict[Tuple[int, int], bool] = {}

    def go(i: int, j: int) -> bool:
        key = (i, j)
        if key in memo:
            return memo[key]
        if i == len(expected):
            ok = j == len(actual)
        elif expected[i].strip() == "...":
            ok = go(i + 1, j) or (j < len(actual) and go(i, j + 1))
        else:
            ok = j < len(actual) and line_ok(expected[i], actual[j]) and go(i + 1, j + 1)
        memo[key] = ok
        return ok

    return go(0, 0)


def normalize(text: str) -> List[str]:
    lines = [l.rstrip() for l in text.replace("\r\n", "\n").split("\n")]
    while lines and lines[-1] == "":
        lines.pop()
    return lines


def parse_console(text: str) -> List[Tuple[str, List[str]]]:
    steps: List[Tuple[str, List[str]]] = []
    lines = text.rstrip("\n").split("\n")
    i = 0
    while i < len(lines):
        if not lines[i].startswith("$ "):
            if lines[i].strip():
                raise ValueError(f"output before the first `$ ` command: {lines[i]!r}")
            i += 1
            continue
        cmd = lines[i][2:]
        while cmd.endswith("\\") and i + 1 < len(lines):
            i += 1
            cmd = cmd + "\n" + lines[i]
        i += 1
        out: List[str] = []
        while i < len(lines) and not lines[i].startswith("$ "):
            out.append(lines[i].rstrip())
            i += 1
        while out and out[-1] == "":
            out.pop()
        steps.append((cmd, out))
    return steps


def run(cmd: List[str], cwd: Path, env: Dict[str, str]) -> Tuple[int, str]:
    try:
        p = subprocess.run(cmd, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           stdin=subprocess.DEVNULL, timeout=BLOCK_TIMEOUT_S)
    except subprocess.TimeoutExpired as e:
        out = e.stdout.decode("utf-8", "replace") if e.stdout else ""
        return 124, out + f"\n(timed out after {BLOCK_TIMEOUT_S} s)"
    return p.returncode, p.stdout.decode("utf-8", "replace")


DOCTEST_DRIVER = r"""
import doctest, sys
text = open(sys.argv[1], encoding="utf-8").read()
parser = doctest.DocTestParser()
test = parser.get_doctest(text, {"__name__": "__main__"}, sys.argv[2], sys.argv[2], 0)
runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
runner.run(test, out=sys.stdout.write)
sys.exit(1 if runner.failures else 0)
"""


def run_block(block: Block, marker: Marker, env: Env, cwd: Path, penv: Dict[str, str]) -> Optional[str]:
    """None when the block passed, else what went wrong."""
    script = cwd.parent / f"block-{block.line}"
    py_env = dict(penv)
    if env.python_preload:
        py_env["LD_PRELOAD"] = env.python_preload
        py_env["ASAN_OPTIONS"] = "detect_leaks=0:abort_on_error=0"
    if block.lang in ("sh", "bash"):
        script.write_text("set -euo pipefail\n" + block.text)
        rc, out = run(["bash", str(script)], cwd, penv)
        if rc != marker.exit_code:
            return f"exit status {rc}, expected {marker.exit_code}; output:\n{out}"
        return None
    if block.lang == "console":
        for cmd, expected in parse_console(block.text):
            rc, out = run(["bash", "-c", cmd], cwd, penv)
            actual = normalize(out)
            if rc != marker.exit_code:
                return f"`{cmd}`: exit status {rc}, expected {marker.exit_code}; output:\n{out}"
            if not match_output(expected, actual):
                diff = "\n".join(difflib.unified_diff(expected, actual, "documented", "actual", lineterm=""))
                return f"`{cmd}`: the output differs from the documented one:\n{diff}"
        return None
    if block.lang == "python":
        script.write_text(block.text)
        rc, out = run([env.python, str(script)], cwd, py_env)
        if rc != marker.exit_code:
            return f"exit status {rc}, expected {marker.exit_code}; output:\n{out}"
        return None
    if block.lang == "pycon":
        script.write_text(block.text)
        rc, out = run([env.python, "-c", DOCTEST_DRIVER, str(script), block.where()], cwd, py_env)
        if rc != 0:
            return f"doctest failed:\n{out}"
        return None
    return f"cannot run a {block.lang} block (mark it `doctest: compile` or `doctest: skip: REASON`)"


class Hub:
    """tensorfetch-test-server over a copy of the reference checkpoints."""

    def __init__(self, server: Path, reference: Path, root: Path) -> None:
        for repo, ref in HUB_REPOS.items():
            shutil.copytree(reference / ref, root / repo)
        self.proc = subprocess.Popen([str(server), "--root", str(root), "--port", "0"], stdout=subprocess.PIPE,
                                     stderr=subprocess.DEVNULL, text=True)
        assert self.proc.stdout is not None
        self.endpoint = self.proc.stdout.readline().strip()
        if not self.endpoint.startswith("http://"):
            self.stop()
            raise RuntimeError(f"the test server printed {self.endpoint!r}, not its endpoint")

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def prepare_page_dir(cwd: Path, reference: Path) -> None:
    cwd.mkdir(parents=True)
    shutil.copyfile(reference / "llama-tiny-single" / "model.safetensors", cwd / "model.safetensors")
    shutil.copytree(reference / "llama-tiny-sharded", cwd / "llama-tiny")


# --- cli.md against --help --------------------------------------------------------------------

OPTION = re.compile(r"(?<![\w-])(--[a-z][a-z0-9-]*[a-z0-9]|-[a-zA-Z])(?![\w-])")


# Commands of optional features (meson feature `fuse`): documented even where this build lacks them.
OPTIONAL_COMMANDS = {"mount", "unmount"}


def run_help(cli: Path, command: str) -> Optional[str]:
    p = subprocess.run([str(cli)] + command.split() + ["--help"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       text=True, timeout=60)
    return p.stdout if p.returncode == 0 else None


def subcommands(help_text: str) -> List[str]:
    """The names under `Subcommands:` of a CLI11 help text."""
    names: List[str] = []
    inside = False
    for line in help_text.split("\n"):
        if line.strip() == "Subcommands:":
            inside = True
            continue
        if inside:
            m = re.match(r"^  ([a-z][a-z0-9-]*)\s", line + " ")
            if not m:
                if line.strip():
                    inside = False
                continue
            names.append(m.group(1))
    return names


def all_commands(cli: Path) -> List[str]:
    """Every command that takes options: `inspect`, ..., `cache ls`, ... (not `cache` itself)."""
    out: List[str] = []
    for name in subcommands(run_help(cli, "") or ""):
        nested = subcommands(run_help(cli, name) or "")
        out += [f"{name} {n}" for n in nested] if nested else [name]
    return out


def help_options(cli: Path, command: str) -> Optional[Set[str]]:
    """The options `tensorfetch COMMAND --help` prints; None when the command does not exist."""
    text = run_help(cli, command)
    if text is None:
        return None
    opts: Set[str] = set()
    for line in text.split("\n"):
        stripped = line.strip()
        if not stripped.startswith("-"):
            continue  # option lines only; descriptions may mention other commands' options
        head = re.split(r"\s{2,}", stripped)[0]
        opts.update(o for o in OPTION.findall(head))
    opts.discard("-h")
    opts.discard("--help")
    return opts


def cli_sections(text: str) -> Dict[str, str]:
    """cli.md's command sections: heading `## tensorfetch CMD` (in backticks or not) -> its text."""
    sections: Dict[str, str] = {}
    current: Optional[str] = None
    for line in text.split("\n"):
        m = re.match(r"^##\s+`?tensorfetch ([a-z ]+?)`?\s*$", line)
        if m:
            current = m.group(1).strip()
            sections[current] = ""
            continue
        if line.startswith("## "):
            current = None
        if current is not None:
            sections[current] += line + "\n"
    return sections


def table_options(section: str) -> Set[str]:
    opts: Set[str] = set()
    for line in section.split("\n"):
        if line.startswith("|"):
            first_cell = line.split("|")[1]
            opts.update(OPTION.findall(first_cell))
    return opts


def exit_codes_of_table(text: str, heading: str) -> Set[int]:
    """The codes in the first column of the table under `## HEADING` of a Markdown page."""
    codes: Set[int] = set()
    inside = False
    for line in text.split("\n"):
        if line.startswith("## "):
            inside = line[3:].strip() == heading
            continue
        if inside and line.startswith("|"):
            codes.update(int(c) for c in re.findall(r"\b(\d+)\b", line.split("|")[1]))
    return codes


def man_text(man: Path) -> str:
    return re.sub(r"\\f[BIRP]", "", man.read_text(encoding="utf-8")).replace("\\-", "-")


def man_commands(man: str) -> Set[str]:
    """The commands of the man page's COMMANDS section (its .SS headings)."""
    section = man.split("\n.SH COMMANDS", 1)[1].split("\n.SH ", 1)[0]
    out: Set[str] = set()
    for heading in re.findall(r'^\.SS "([^"]*)"', section, flags=re.M):
        words = heading.split()
        out.add(" ".join(words[:2]) if words[0] == "cache" else words[0])
    return out


def man_exit_codes(man: str) -> Set[int]:
    section = man.split("\n.SH EXIT STATUS", 1)[1].split("\n.SH ", 1)[0]
    codes: Set[int] = set()
    for line in re.findall(r"^\.BR? (.*)$", section, flags=re.M):
        if re.fullmatch(r'[\d", ]+', line.strip()):
            codes.update(int(c) for c in re.findall(r"\d+", line))
    return codes


def check_cli(cli: Path, cli_md: Path, man: Optional[Path] = None, readme: Optional[Path] = None) -> List[str]:
    text = cli_md.read_text(encoding="utf-8")
    sections = cli_sections(text)
    failures: List[str] = []
    every: Set[str] = set(help_options(cli, "") or set())
    commands = all_commands(cli)
    if len(commands) < 5:
        failures.append(f"{cli}: --help lists only the commands {commands}")
    for command in commands:
        opts = help_options(cli, command)
        if opts is None:
            failures.append(f"`tensorfetch {command} --help` failed")
            continue
        every |= opts
        if command not in sections:
            failures.append(f"{cli_md}: no section `## tensorfetch {command}`")
            continue
        documented = table_options(sections[command])
        for o in sorted(opts - documented):
            failures.append(f"{cli_md}: `tensorfetch {command} --help` prints {o}, missing from the section's tables")
        for o in sorted(documented - opts):
            failures.append(f"{cli_md}: the `tensorfetch {command}` section lists {o}, which its --help does not print")
    for command in sections:
        if command not in commands and command not in OPTIONAL_COMMANDS:
            failures.append(f"{cli_md}: a section for `tensorfetch {command}`, which `tensorfetch --help` does not list")
    mentioned = set(OPTION.findall(re.sub(r"```.*?```", "", text, flags=re.S)))
    mentioned |= {o for o in re.findall(r"tensorfetch[^\n`]*", text) for o in OPTION.findall(o)}
    for o in sorted(o for o in mentioned if o.startswith("--") and o not in every | {"--help", "--version"}):
        failures.append(f"{cli_md}: names {o}, which no `tensorfetch ... --help` prints")

    # The man page and the README agree with cli.md on the commands and the exit codes. (That the
    # man page names every option of every --help is the `install` suite's check.)
    codes = exit_codes_of_table(text, "Exit codes")
    if len(codes) < 5:
        failures.append(f"{cli_md}: no table of exit codes under `## Exit codes` (found {sorted(codes)})")
    if man is not None and man.exists():
        mtext = man_text(man)
        if man_commands(mtext) != set(sections):
            failures.append(f"{man}: its COMMANDS are {sorted(man_commands(mtext))}, cli.md's {sorted(sections)}")
        if man_exit_codes(mtext) != codes:
            failures.append(f"{man}: its EXIT STATUS codes are {sorted(man_exit_codes(mtext))}, cli.md's {sorted(codes)}")
    if readme is not None and readme.exists():
        rcodes = exit_codes_of_table(readme.read_text(encoding="utf-8"), "Exit codes")
        if rcodes != codes:
            failures.append(f"{readme}: its exit codes are {sorted(rcodes)}, cli.md's {sorted(codes)}")
        # CI runs exactly the README's test command (.ci/run).
        ci = readme.parent / ".ci" / "run"
        if ci.exists():
            commands = [l.strip() for l in ci.read_text(encoding="utf-8").split("\n")
                        if l.strip() and not l.strip().startswith(("#", "set ", "cd "))]
            blocks = "\n".join(b.text for b in extract_blocks(readme)[0] if b.lang in ("sh", "bash", "console"))
            for c in commands:
                if not re.search(r"^(\$ )?" + re.escape(c) + r"(\s|$)", blocks, flags=re.M):
                    failures.append(f"{readme}: no shell block runs `{c}`, the command .ci/run runs")
    return failures


# --- python.md against the package ------------------------------------------------------------

PYTHON_API = r"""
import json, tensorfetch
print(json.dumps({"names": list(tensorfetch.__all__),
                  "options": sorted([*tensorfetch._OPEN_OPTIONS, *tensorfetch._FETCH_OPTIONS])}))
"""


def check_python_api(env: "Env", penv: Dict[str, str], python_md: Path) -> List[str]:
    """python.md names (in backticks) every public name of the package and every keyword option."""
    rc, out = run([env.python, "-c", PYTHON_API], python_md.parent, penv)
    if rc != 0:
        return [f"cannot list the Python package's API: {out}"]
    api = json.loads(out.strip().splitlines()[-1])
    text = re.sub(r"^(`{3,}).*?^\1", "", python_md.read_text(encoding="utf-8"), flags=re.S | re.M)
    code = set(re.findall(r"`([^`\n]+)`", text))
    words = {w for c in code for w in re.findall(r"[A-Za-z_][A-Za-z0-9_]*", c)}
    failures = [f"{python_md}: does not name tensorfetch.{n} (in tensorfetch.__all__)" for n in api["names"]
                if n not in words]
    failures += [f"{python_md}: does not name the keyword option `{o}` of safe_open" for o in api["options"]
                 if o not in words]
    return failures


# --- links --------------------------------------------------------------------------------------

def slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation but - and _ dropped, spaces to -."""
    text = re.sub(r"[`*]", "", heading.strip()).lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(path: Path) -> Set[str]:
    seen: Dict[str, int] = {}
    out: Set[str] = set()
    in_code = False
    for line in path.read_text(encoding="utf-8").split("\n"):
        if FENCE.match(line):
            in_code = not in_code
            continue
        m = re.match(r"^#{1,6}\s+(.*)$", line)
        if m and not in_code:
            base = slug(m.group(1))
            n = seen.get(base, 0)
            seen[base] = n + 1
            out.add(base if n == 0 else f"{base}-{n}")
    return out


def check_links(files: List[Path]) -> List[str]:
    """Every relative link of the pages names a file that exists, and an anchor its headings make."""
    failures: List[str] = []
    for path in files:
        text = re.sub(r"```.*?```", "", path.read_text(encoding="utf-8"), flags=re.S)
        for target in re.findall(r"\]\(([^)\s]+)\)", text):
            if re.match(r"^[a-z]+:", target):
                continue  # https:, mailto:
            file_part, _, anchor = target.partition("#")
            dest = (path.parent / file_part).resolve() if file_part else path.resolve()
            if not dest.exists():
                failures.append(f"{path}: a link to {target}: no such file")
                continue
            if anchor and dest.suffix == ".md" and anchor not in anchors(dest):
                failures.append(f"{path}: a link to {target}: no such heading in {dest.name}")
    return failures


# --- main ---------------------------------------------------------------------------------------

def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--source", type=Path, required=True, help="the repository root")
    ap.add_argument("--cli", type=Path, required=True, help="the build's tensorfetch")
    ap.add_argument("--server", type=Path, required=True, help="the build's tensorfetch-test-server")
    ap.add_argument("--pythonpath", default="", help="the build's Python package directory")
    ap.add_argument("--python", default="/usr/bin/python3" if Path("/usr/bin/python3").exists() else sys.executable,
                    help="the interpreter of python/pycon blocks; empty: the build has no Python package, leave them out")
    ap.add_argument("--python-preload", default="", help="LD_PRELOAD for python/pycon blocks (sanitizer runtimes)")
    ap.add_argument("--reference", type=Path, default=Path(os.environ.get("TENSORFETCH_REFERENCE_DIR", "")))
    ap.add_argument("--check-cli", action="store_true", help="only compare docs/cli.md with the --help texts")
    ap.add_argument("--list", action="store_true", help="list the examples and their markers; run nothing")
    ap.add_argument("files", nargs="*", type=Path, help="Markdown files (default: README.md and docs/*.md)")
    args = ap.parse_args()

    if args.check_cli:
        failures = check_cli(args.cli, args.source / "docs" / "cli.md", args.source / "tools" / "tensorfetch" / "tensorfetch.1",
                             args.source / "README.md")
        for f in failures:
            print("FAIL:", f)
        print(f"cli.md against --help: {len(failures)} failure(s)")
        return 1 if failures else 0

    files = args.files or [args.source / "README.md"] + sorted((args.source / "docs").glob("*.md"))
    failures: List[str] = check_links(files)
    pages: List[Tuple[Path, List[Tuple[Block, Marker]]]] = []
    counts = {"run": 0, "skip": 0, "compile": 0}
    left_out = 0  # python blocks of a build without the Python package
    for path in files:
        blocks, errors = extract_blocks(path)
        failures += errors
        todo: List[Tuple[Block, Marker]] = []
        for b in blocks:
            if b.lang not in EXAMPLE_LANGS:
                if b.marker is not None:
                    failures.append(f"{b.where()}: a doctest marker on a {b.lang or 'plain'} block, which is no example")
                continue
            if b.marker is None:
                failures.append(f"{b.where()}: a {b.lang} example without a marker (<!-- doctest --> or "
                                "<!-- doctest: skip: REASON --> on the line before the fence)")
                continue
            try:
                m = parse_marker(b.marker)
            except ValueError as e:
                failures.append(f"{path}:{b.marker_line}: {e}")
                continue
            if m.action == "compile" and b.lang != "c":
                failures.append(f"{b.where()}: `doctest: compile` is for c blocks")
                continue
            if b.lang == "c" and m.action == "run":
                failures.append(f"{b.where()}: a c block is built by the install suite: mark it `doctest: compile`")
                continue
            counts[m.action] += 1
            if args.list:
                print(f"{b.where()}: {b.lang}: {m.action}{(' (' + m.reason + ')') if m.reason else ''}")
            if m.action == "run" and b.lang in ("python", "pycon") and not args.python:
                left_out += 1
                continue
            if m.action == "run":
                todo.append((b, m))
        pages.append((path, todo))
    if args.list:
        for f in failures:
            print("FAIL:", f)
        print(f"{counts['run']} run, {counts['skip']} skipped, {counts['compile']} built by the install suite")
        return 1 if failures else 0

    if any(todo for _, todo in pages):
        if not (args.reference / "MANIFEST.json").is_file():
            print(f"FAIL: no reference checkpoints at {args.reference} (TENSORFETCH_REFERENCE_DIR)")
            return 1
        with tempfile.TemporaryDirectory(prefix="tensorfetch-docs-") as tmp_name:
            tmp = Path(tmp_name)
            hub = Hub(args.server, args.reference, tmp / "hub")
            try:
                pythonpath = ":".join(str(Path(p).resolve()) for p in args.pythonpath.split(":") if p)
                env = Env(args.cli.resolve(), pythonpath, args.python_preload, hub.endpoint, args.reference,
                          args.python)
                python_md = args.source / "docs" / "python.md"
                if args.python and python_md.exists():
                    home = tmp / "python-api"
                    home.mkdir()
                    penv = page_environment(env, home)
                    if env.python_preload:
                        penv["LD_PRELOAD"] = env.python_preload
                        penv["ASAN_OPTIONS"] = "detect_leaks=0:abort_on_error=0"
                    problems = check_python_api(env, penv, python_md)
                    print(f"{'ok' if not problems else 'FAIL'} {python_md}: names the package's API")
                    failures += problems
                for path, todo in pages:
                    if not todo:
                        continue
                    home = tmp / ("page-" + path.stem)
                    cwd = home / "work"
                    prepare_page_dir(cwd, args.reference)
                    penv = page_environment(env, home)
                    for block, marker in todo:
                        start = time.monotonic()
                        problem = run_block(block, marker, env, cwd, penv)
                        took = time.monotonic() - start
                        status = "ok" if problem is None else "FAIL"
                        print(f"{status} {block.where()} ({block.lang}, {took:.2f} s)")
                        if problem is not None:
                            failures.append(f"{block.where()}: {problem}")
            finally:
                hub.stop()

    for f in failures:
        print("FAIL:", f)
    if left_out:
        print(f"NOTE: {left_out} python/pycon example(s) not run: this build has no Python package")
    print(f"{counts['run'] - left_out} run, {counts['skip']} skipped, {counts['compile']} built by the install suite; "
          f"{len(failures)} failure(s)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
