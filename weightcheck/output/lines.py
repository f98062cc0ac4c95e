"""The one-line emitters: ``concise`` (ruff's concise format: a line per finding, then the
summary) and ``github`` (GitHub Actions workflow commands: the run's log shows each as an
annotation, on the pull request when it names one of its files). They draw the document's
:class:`~weightcheck.output.blocks.Annotation` s and nothing else."""

from __future__ import annotations

import os

from weightcheck.output.blocks import Annotation
from weightcheck.output.text import painted

GH_LEVEL = {"error": "error", "warning": "warning", "info": "notice"}


def _gh_escape(text: str, prop: bool = False) -> str:
    text = text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")
    if prop:
        text = text.replace(":", "%3A").replace(",", "%2C")
    return text


def gh_command(severity: str, title: str, message: str, file: str | None = None) -> str:
    """A GitHub Actions workflow command (``::error title=...::message``)."""
    props = [f"title={_gh_escape(title, True)}"]
    if file:
        props.insert(0, f"file={_gh_escape(file, True)}")
    return f"::{GH_LEVEL.get(severity, 'error')} {','.join(props)}::{_gh_escape(message)}"


def repo_file(path: str | None) -> str | None:
    """A local path as GitHub names a file of the repository (relative to the working directory),
    or None when it lies outside it."""
    if not path:
        return None
    rel = os.path.relpath(os.path.abspath(path))
    return None if rel.startswith("..") else rel


class ConciseEmitter:
    def __init__(self, width=None, color: bool = False):
        self.color = color

    def __call__(self, blocks: list) -> str:
        return "\n".join(
            painted(b.concise, self.color)
            for b in blocks
            if isinstance(b, Annotation) and b.concise is not None
        )


class GithubEmitter:
    def __init__(self, width=None, color: bool = False):
        pass

    def __call__(self, blocks: list) -> str:
        return "\n".join(
            gh_command(b.severity, b.title, b.message, b.file) if b.severity else b.message
            for b in blocks
            if isinstance(b, Annotation)
        )
