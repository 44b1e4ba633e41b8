"""The command-line reference page (``docs/reference/cli.md``), generated from the parser.

Every subcommand of ``p2pfed`` with its usage line and a table of its arguments (their help,
defaults and choices), read from the argparse parser itself, so the page lists exactly what the
command accepts. The usage line is composed here rather than by argparse, whose wrapping
depends on the terminal's width.
"""

from __future__ import annotations

import argparse

from p2pfed.cli.main import build_parser
from p2pfed.docs_gen.markdown import code, first_paragraph, table
from p2pfed.docs_gen.scenario_page import GENERATED


def _options(parser: argparse.ArgumentParser) -> list[argparse.Action]:
    """The arguments a reader gives: every action but help and the subcommand choice."""
    return [a for a in parser._actions
            if not isinstance(a, (argparse._HelpAction, argparse._SubParsersAction))]


def _metavar(action: argparse.Action) -> str:
    if action.nargs == 0:
        return ""
    name = action.metavar or (action.dest if not action.option_strings else action.dest.upper())
    name = name if isinstance(name, str) else " ".join(name)
    return {"?": f"[{name}]", "+": f"{name} [{name} ...]", "*": f"[{name} ...]"}.get(str(action.nargs), name)


def _spelling(action: argparse.Action) -> str:
    """How the argument is written: ``--out OUT``, ``scenarios [scenarios ...]``."""
    if not action.option_strings:
        return _metavar(action)
    return " ".join(p for p in (", ".join(action.option_strings), _metavar(action)) if p)


def usage(prog: str, parser: argparse.ArgumentParser) -> str:
    """One usage line: positionals as written, options in brackets unless required."""
    words = [prog]
    for action in _options(parser):
        text = _spelling(action) if not action.option_strings else \
            " ".join(p for p in (action.option_strings[-1], _metavar(action)) if p)
        words.append(text if not action.option_strings or action.required else f"[{text}]")
    if any(isinstance(a, argparse._SubParsersAction) for a in parser._actions):
        words.append("COMMAND ...")
    return " ".join(words)


def _default(action: argparse.Action) -> str:
    if action.required:
        return "required"
    if action.default is None or action.default is False or action.default in ([], argparse.SUPPRESS) \
            or action.nargs == 0:
        return ""
    return code(str(action.default))


def _help(action: argparse.Action) -> str:
    text = action.help or ""
    if action.choices:
        text += f" One of: {', '.join(code(str(c)) for c in action.choices)}."
    return text.strip()


def arguments(parser: argparse.ArgumentParser) -> str:
    rows = [(code(_spelling(a)), _default(a), _help(a)) for a in _options(parser)]
    return table(("argument", "default", "description"), rows) if rows else "No arguments."


def commands(parser: argparse.ArgumentParser) -> list[tuple[str, str, argparse.ArgumentParser]]:
    """(name, help, parser) of every subcommand, in the order ``--help`` lists them."""
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    helps = {c.dest: c.help or "" for c in sub._choices_actions}
    return [(name, helps.get(name, ""), p) for name, p in sub.choices.items()]


def render() -> str:
    """The whole page."""
    parser = build_parser()
    parts = [GENERATED, "# Command-line reference", first_paragraph(parser.description),
             "Every command refuses bad input before any work, one line per problem, with exit status 2. "
             "The scenario's own keys are in the [scenario reference](scenario.md); "
             "`p2pfed explain FIELD` prints one of them.",
             "```\n" + usage("p2pfed", parser) + "\n```", arguments(parser)]
    for name, summary, sub in commands(parser):
        parts += [f"## `p2pfed {name}`", summary[:1].upper() + summary[1:] + "." if summary else "",
                  "```\n" + usage(f"p2pfed {name}", sub) + "\n```", arguments(sub)]
    return "\n\n".join(p for p in parts if p) + "\n"
