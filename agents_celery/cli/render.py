"""The terminal renderer of the client commands: live text, tool calls and results, styled with rich on a
terminal and plain text otherwise.

rich comes with the ``[cli]`` extra; without it every command still works and prints plain text (an operator on a
server with the core install only can still ``show``, ``runs``, ``tail`` and ``approve``).
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..events import Event


def _is_user(data: dict[str, Any]) -> bool:
    """Whether a text event carries the user's own message (its id starts ``usr_``), not the model's."""
    return str(data.get("message_id", "")).startswith("usr_")


class Printer:
    """Prints lines and streamed text, and renders events; a spinner (terminal only) fills the waits."""

    def __init__(self) -> None:
        self.console: Any = None
        try:
            from rich.console import Console
        except ImportError:
            self.styled = False
        else:
            self.console = Console(highlight=False, soft_wrap=True)
            self.styled = bool(self.console.is_terminal)
        self.text_open = False
        self.calls: dict[str, list[str]] = {}
        self._status: Any = None

    def line(self, text: str, style: str = "") -> None:
        self.spin(None)
        self.end_text()
        if self.styled:
            self.console.print(text, style=style or None, markup=False, highlight=False)
        else:
            print(text, flush=True)

    def write(self, text: str) -> None:
        self.spin(None)
        self.text_open = True
        if self.styled:
            self.console.print(text, end="", markup=False, highlight=False, soft_wrap=True)
        else:
            sys.stdout.write(text)
            sys.stdout.flush()

    def end_text(self) -> None:
        if self.text_open:
            self.text_open = False
            self.write("\n")
            self.text_open = False

    def quiet(self) -> None:
        """No spinner, no open text line: before a prompt, or an error on stderr."""
        self.spin(None)
        self.end_text()

    def spin(self, text: str | None) -> None:
        """Show a spinner with ``text`` (terminal only) until the next output; None removes it."""
        if self._status is not None:
            self._status.stop()
            self._status = None
        if text and self.styled and not self.text_open:
            self._status = self.console.status(text)
            self._status.start()

    def event(self, event: Event) -> None:
        from ..events import EventType as T

        d = event.data
        if event.type is T.TEXT_MESSAGE_CONTENT and _is_user(d):
            self.line(f"you: {d.get('delta', '')}", "bold")
        elif event.type is T.TEXT_MESSAGE_CONTENT:
            self.write(str(d.get("delta", "")))
        elif event.type is T.TEXT_MESSAGE_END and not _is_user(d):
            self.end_text()
        elif event.type is T.TOOL_CALL_START:
            self.calls[d["tool_call_id"]] = [str(d.get("tool_call_name")), ""]
        elif event.type is T.TOOL_CALL_ARGS:
            self.calls.setdefault(d["tool_call_id"], ["?", ""])[1] += str(d.get("delta", ""))
        elif event.type is T.TOOL_CALL_END:
            name, args = self.calls.get(d["tool_call_id"], ["?", ""])
            self.line(f"⚙ {name}({args})", "cyan")
        elif event.type is T.TOOL_CALL_RESULT:
            self.line(f"  ↳ {d.get('content', '')}", "green")
        elif event.type is T.STEP_STARTED:
            self._step(d.get("metadata") or {})
        elif event.type is T.CUSTOM:
            self.line(f"· {d.get('name')}: {d.get('value')}", "dim")
        elif event.type is T.RUN_ERROR:
            self.line(f"✗ {d.get('message')}", "red")
        elif event.is_pause:
            self.line("⏸ paused: a tool call waits for a decision", "yellow")

    def _step(self, meta: dict[str, Any]) -> None:
        if int(meta.get("attempt", 1)) > 1:
            self.line(f"↻ step {meta.get('step')} again (attempt {meta.get('attempt')}): a worker was lost", "yellow")
        self.spin("running tools..." if meta.get("kind") == "tools" else "thinking...")

    def ask(self, prompt: str) -> str | None:
        """One line from stdin (None at end of input)."""
        self.quiet()
        try:
            return input(prompt)
        except EOFError:
            print(flush=True)
            return None
