"""Running a documentation page's code blocks as a reader would, in order, in one folder.

A page's fenced blocks are read top to bottom:

- ```` ```yaml title="x.yaml" ```` (any language with a ``title``): a file the reader saves; it is
  written to the folder (YAML and Python are checked to parse first);
- ```` ```python ````: executed, every block in one namespace, as one script read in order;
- ```` ```bash ````: each command run in the folder; ``p2pfed ...`` through ``p2pfed.cli.main``
  (the console script's function, in this process), anything else with bash. A command must
  exit 0, or the status its comment names (``# exit code 2``). After a ``p2pfed`` command that
  writes results to ``--out``, the results it promises must be there;
- ```` ```yaml ```` without a title: a fragment of a scenario, which must parse.

A block preceded by ``<!-- test: parse ... -->`` is not executed: each ``p2pfed`` command in it
is parsed by the command line's parser (a bad option or sub-command fails), the rest is shown
only. The comment says why, and which test runs the command for real, if one does (root
namespaces, real hosts, long runs). Other languages (``text``, ``mermaid``) are not code.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import yaml

from tests.conftest import ROOT

FENCE = re.compile(r"(?:^<!--\s*test:\s*(?P<mode>[\w-]+)(?P<why>[^>]*)-->\s*\n)?"
                   r"^```(?P<lang>[\w-]*)(?P<attrs>[^\n]*)\n(?P<code>.*?)^```[ \t]*$", re.M | re.S)
TITLE = re.compile(r'title="([^"]+)"')
EXIT = re.compile(r"#.*\bexit (?:code|status) (\d+)")
# The repository's folders a page's commands name, visible from the page's own folder.
SHARED = ("scenarios", "sweeps", "examples", "topologies")
# What a results folder holds once a command that writes one has finished.
RESULTS = {"run": "summary.json", "launch": "summary.json", "merge": "summary.json",
           "compare": "comparison.csv", "sweep": "summary.csv", "plan": "plan.json"}


@dataclass(frozen=True)
class Block:
    lang: str
    code: str
    title: str | None
    mode: str            # "run" or "parse"
    why: str
    line: int            # where the block starts on its page


def blocks(page: Path) -> list[Block]:
    text = page.read_text()
    found = []
    for m in FENCE.finditer(text):
        title = TITLE.search(m["attrs"])
        mode, why = m["mode"] or "run", (m["why"] or "").strip()
        if mode not in ("run", "parse"):
            raise ValueError(f"{page}: unknown test mode {mode!r}")
        if mode == "parse" and not why:
            raise ValueError(f"{page}: a parse-only block must say why")
        found.append(Block(m["lang"], m["code"], title[1] if title else None, mode, why,
                           text.count("\n", 0, m.start("code"))))
    return found


def commands(code: str) -> list[str]:
    """A bash block's commands: one per line, ``\\`` joining continued lines, blank lines out."""
    joined = re.sub(r"\\\n\s*", " ", code)
    return [line.strip() for line in joined.splitlines() if line.strip() and not line.strip().startswith("#")]


def without_substitutions(command: str) -> str:
    """``$(...)`` (nested parentheses included) as one placeholder word, for parsing only."""
    out, i = [], 0
    while (start := command.find("$(", i)) >= 0:
        depth, j = 0, start + 1
        for j in range(start + 1, len(command)):
            depth += {"(": 1, ")": -1}.get(command[j], 0)
            if depth == 0:
                break
        out += [command[i:start], "SUBSTITUTED"]
        i = j + 1
    return "".join(out) + command[i:]


def p2pfed_argv(command: str) -> list[str] | None:
    """The arguments of a ``p2pfed`` (or ``sudo p2pfed``) command; None for another program."""
    words = shlex.split(without_substitutions(command), comments=True)
    if words[:1] == ["sudo"]:
        words = words[1:]
    return words[1:] if words[:1] == ["p2pfed"] else None


def prepare(folder: Path) -> None:
    """The page's folder: empty but for links to the repository's scenarios, sweeps, examples."""
    for name in SHARED:
        (folder / name).symlink_to(ROOT / name, target_is_directory=True)


class PageRun:
    """One page's blocks, run in ``folder`` (the working directory while they run)."""

    def __init__(self, page: Path, folder: Path) -> None:
        self.page = page
        self.folder = folder
        self.namespace: dict = {"__name__": "__main__"}
        self.ran: list[list[str]] = []       # every p2pfed command executed
        self.parsed: list[list[str]] = []    # every p2pfed command only parsed

    def where(self, block: Block) -> str:
        page = self.page.relative_to(ROOT) if self.page.is_relative_to(ROOT) else self.page
        return f"{page}:{block.line + 1}"

    def run(self) -> PageRun:
        """Every block in order."""
        before, path, imported = Path.cwd(), list(sys.path), set(sys.modules)
        os.chdir(self.folder)
        try:
            for block in blocks(self.page):
                self.block(block)
        finally:
            os.chdir(before)
            sys.path[:] = path   # a page may add its folder; its own modules go with it
            folder = self.folder.resolve()
            for name in set(sys.modules) - imported:   # only what the page imported can be its own
                if Path(getattr(sys.modules[name], "__file__", None) or "/").resolve().is_relative_to(folder):
                    del sys.modules[name]
        return self

    def block(self, block: Block) -> None:
        where = self.where(block)
        if block.title is not None:
            if block.lang == "yaml":
                yaml.safe_load(block.code)
            elif block.lang == "python":
                compile(block.code, where, "exec")
            path = self.folder / block.title
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(block.code)
        elif block.lang == "yaml":
            assert isinstance(yaml.safe_load(block.code), (dict, list)), where
        elif block.lang == "python":
            code = compile(block.code, where, "exec")
            if block.mode == "run":
                exec(code, self.namespace)   # noqa: S102 - the page's own code, as its reader runs it
        elif block.lang == "bash":
            for command in commands(block.code):
                self.command(command, where, block.mode)

    def command(self, command: str, where: str, mode: str) -> None:
        from p2pfed.cli.main import build_parser, main

        argv = p2pfed_argv(command)
        if mode == "parse":
            if argv is not None:
                build_parser().parse_args(argv)   # exits (status 2) on a bad option
                self.parsed.append(argv)
            return
        assert not command.startswith("sudo"), f"{where}: a command needing root must be parse-only"
        expected = int(EXIT.search(command)[1]) if EXIT.search(command) else 0
        if argv is None:
            env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
            done = subprocess.run(["bash", "-c", command], cwd=self.folder, env=env, capture_output=True,
                                  text=True, timeout=120)
            assert done.returncode == expected, f"{where}: {command}\n{done.stdout}{done.stderr}"
            return
        assert main(argv) == expected, f"{where}: {command}"
        self.ran.append(argv)
        if expected == 0 and "--out" in argv and argv[0] in RESULTS:
            out = self.folder / argv[argv.index("--out") + 1]
            assert (out / RESULTS[argv[0]]).is_file(), f"{where}: {command}: no {RESULTS[argv[0]]} in --out"
