"""What a browser submits for a rendered form, read from the HTML the way the HTML standard says
(so a test can send a page back unchanged without a browser, and see what a user's browser sees):

- `<input>`: its value attribute, with carriage returns and line feeds stripped (the value
  sanitization of text inputs: a one-line box cannot hold a newline); checkboxes and radios only
  when checked; no file, submit, button, reset or image inputs;
- `<textarea>`: its text, less one line feed right after the start tag (the parser drops it), with
  every line break sent as CR LF (form submission normalises them);
- `<select>`: the selected option's value (its text when it has no value attribute), else the
  first option's;
- disabled controls and controls without a name are not sent.

Tests pass the result to Django's test client as the POST body.
"""

from __future__ import annotations

import re
from html.parser import HTMLParser

SKIPPED_INPUTS = {"file", "submit", "button", "reset", "image"}
FLOAT = re.compile(r"^-?(?:\d+(?:\.\d+)?|\.\d+)(?:[eE][-+]?\d+)?$")


def _crlf(text: str) -> str:
    return re.sub(r"\r\n|\r|\n", "\r\n", text)


class _FormReader(HTMLParser):
    def __init__(self, form_id: str | None):
        super().__init__(convert_charrefs=True)
        self.form_id = form_id
        self.inside = form_id is None
        self.fields: list[tuple[str, str]] = []
        self._textarea: tuple[str, list[str]] | None = None
        self._select: dict | None = None
        self._option: dict | None = None

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "form" and self.form_id is not None:
            self.inside = a.get("id") == self.form_id
            return
        if not self.inside:
            return
        disabled = "disabled" in a
        if tag == "input":
            kind = (a.get("type") or "text").lower()
            if disabled or not a.get("name") or kind in SKIPPED_INPUTS:
                return
            if kind in ("checkbox", "radio"):
                if "checked" in a:
                    self.fields.append((a["name"], a.get("value") or "on"))
                return
            value = re.sub(r"[\r\n]", "", a.get("value") or "")
            if kind == "number" and value and not FLOAT.match(value):
                value = ""  # the number input's sanitization: not a number is empty
            self.fields.append((a["name"], value))
        elif tag == "textarea":
            self._textarea = (a.get("name") if not disabled else None, [])
        elif tag == "select":
            self._select = {"name": a.get("name") if not disabled else None, "options": []}
        elif tag == "option" and self._select is not None:
            self._option = {"value": a.get("value"), "text": [], "selected": "selected" in a, "disabled": disabled}

    def handle_endtag(self, tag):
        if tag == "form" and self.form_id is not None:
            self.inside = False
        elif tag == "textarea" and self._textarea is not None:
            name, parts = self._textarea
            text = "".join(parts)
            if text.startswith("\r\n"):
                text = text[2:]
            elif text.startswith("\n"):
                text = text[1:]
            if name:
                self.fields.append((name, _crlf(text)))
            self._textarea = None
        elif tag == "option" and self._option is not None:
            self._close_option()
        elif tag == "select" and self._select is not None:
            self._close_option()
            select, self._select = self._select, None
            options = select["options"]
            chosen = [o for o in options if o["selected"]] or [o for o in options if not o["disabled"]][:1]
            if select["name"] and chosen:
                self.fields.append((select["name"], chosen[-1]["value"]))

    def _close_option(self):
        if self._option is not None:
            option, self._option = self._option, None
            text = " ".join("".join(option["text"]).split())
            self._select["options"].append(
                {**option, "value": option["value"] if option["value"] is not None else text}
            )

    def handle_data(self, data):
        if self._textarea is not None:
            self._textarea[1].append(data)
        elif self._option is not None:
            self._option["text"].append(data)


def submitted_fields(html: str, form_id: str | None = None) -> dict[str, str]:
    """{name: value} that a browser submits for the form with this id (every control when None)."""
    reader = _FormReader(form_id)
    reader.feed(html)
    reader.close()
    return dict(reader.fields)
