"""Providers files: read a file's YAML and resolve it against the process environment.

The edge of configuration: :mod:`app.config.schema` is the schema and parses a mapping with
the environment it is given; this module reads files and ``os.environ``.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import yaml

from app.config.schema import ConfigError, RoutingConfig, parse_config

#: Quoted text in a YAML parser's message longer than a token (a name, an alias: it
#: could be a secret); ``'<block end>'``-style token names and single characters stay.
_QUOTED = re.compile(r"'(?!<)[^'\s]{4,}'")


def load_config(path: Path, env: dict[str, str] | None = None) -> RoutingConfig:
    """The providers file's config, ``${NAME}`` resolved from ``env`` (default: the
    process environment)."""
    data = read_yaml(path)
    try:
        return parse_config(data, dict(os.environ) if env is None else env)
    except ConfigError as exc:
        raise ConfigError(f"{path}: {exc}") from None


def read_yaml(path: Path) -> Any:
    """A providers file's YAML, or one ConfigError line (never the offending text)."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot read providers file {path}: {exc.strerror}") from None
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path} is not UTF-8 text (byte {exc.start})") from None
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError(
            f"{path} is not valid YAML{_yaml_where(exc)}: {_yaml_problem(exc)}"
        ) from None


def _yaml_where(error: yaml.YAMLError) -> str:
    """`` at line L, column C`` (1-based) of a YAML error, when the parser knows it."""
    mark = getattr(error, "problem_mark", None) or getattr(error, "context_mark", None)
    return f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""


def _yaml_problem(error: yaml.YAMLError) -> str:
    """What the parser found wrong, in its own fixed words (never the offending text: it
    may be an API key), else the error's class name."""
    problem = getattr(error, "problem", None)
    if isinstance(problem, str) and problem:
        return _QUOTED.sub("'…'", problem)[:120]
    return type(error).__name__
