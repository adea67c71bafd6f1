"""What a reviewer reads and what they answer with.

The question first: :func:`headline` picks the human question out of an approval's prompt by
the convention documented in docs/reviewers.md (a string prompt is the question; otherwise its
``question``, then its ``title`` field), and the rest of the prompt is shown below it.

The answer: :func:`schema_fields` turns a wait's JSON Schema (an approval's response schema, a
hook's payload schema) into form fields (strings, numbers, integers, booleans, enums, required
marks, nested objects two levels deep; anything else is a JSON field), and :func:`read_answer`
reads a submitted form back into the JSON answer, typing each field by the schema. A field that
cannot be read (a number field holding words) is an error next to that field; the raw JSON
textarea, when filled, is used instead of the fields. The server then validates the answer
against the schema (the service functions are the authority) and a refusal's path is mapped
back to its field, so the reviewer sees the message beside what they typed.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from typing import Any

import orjson
from starlette.datastructures import FormData

from ..._json import MAX_DEPTH, InexactNumberError, JSONTooDeepError, loads_exact

#: The prompt fields that hold the question, in the order they are looked for.
QUESTION_KEYS = ("question", "title")
#: How deep nested objects become nested fieldsets (deeper ones are JSON fields).
MAX_FORM_DEPTH = 2
#: At most this many generated fields; a larger schema is answered as JSON.
MAX_FIELDS = 60


def headline(prompt: Any) -> tuple[str | None, Any]:
    """(the question, the rest of the prompt): a string prompt is the question itself; an object
    with a string ``question`` (or else ``title``) gives it, and the rest is the object without
    that field (None when nothing is left). Otherwise there is no headline."""
    if isinstance(prompt, str):
        return prompt, None
    if isinstance(prompt, dict):
        for key in QUESTION_KEYS:
            value = prompt.get(key)
            if isinstance(value, str) and value.strip():
                rest = {k: v for k, v in prompt.items() if k != key}
                return value, rest or None
    return None, prompt


@dataclass(frozen=True, slots=True)
class Field:
    """One generated form field (or, with ``kind == "group"``, a nested object's fieldset)."""

    name: str  # the form field's name: "f" + the JSON path joined by "." ("f.address.city")
    path: tuple[str, ...]
    label: str
    kind: str  # string, text, number, integer, boolean, enum, json, group
    required: bool
    description: str = ""
    options: tuple[tuple[str, str], ...] = ()  # enum: (the value as JSON, its label)
    depth: int = 0
    closes: int = 0  # how many nested fieldsets end after this field (the template's nesting)


def _field_name(path: tuple[str, ...]) -> str:
    return "f." + ".".join(path)


def _kind(schema: dict[str, Any], depth: int) -> str:
    if "enum" in schema and isinstance(schema["enum"], list) and schema["enum"]:
        return "enum"
    if "const" in schema:
        return "json"
    kind = schema.get("type")
    if kind == "string":
        fmt = schema.get("format")
        long = isinstance(schema.get("maxLength"), int) and schema["maxLength"] > 200
        return "text" if long or fmt == "textarea" else "string"
    if kind in ("number", "integer", "boolean"):
        return str(kind)
    properties = schema.get("properties")
    if kind == "object" and isinstance(properties, dict) and properties and depth < MAX_FORM_DEPTH:
        return "group"
    return "json"


def schema_fields(schema: Any) -> list[Field] | None:
    """The fields of an object schema with properties, in declaration order; None when the
    schema is not one (the answer is then typed as JSON)."""
    if not isinstance(schema, dict) or schema.get("type") != "object":
        return None
    if not isinstance(schema.get("properties"), dict) or not schema["properties"]:
        return None
    out: list[Field] = []

    def walk(node: dict[str, Any], path: tuple[str, ...], depth: int) -> None:
        listed = node.get("required")
        required: list[Any] = listed if isinstance(listed, list) else []
        for key, sub in node["properties"].items():
            sub = sub if isinstance(sub, dict) else {}
            here = (*path, str(key))
            kind = _kind(sub, depth)
            label = str(sub.get("title") or key)
            description = str(sub.get("description") or "")
            options: tuple[tuple[str, str], ...] = ()
            if kind == "enum":
                options = tuple((_json_text(v), _label_of(v)) for v in sub["enum"])
            out.append(
                Field(_field_name(here), here, label, kind, key in required, description, options, depth)
            )
            if kind == "group":
                walk(sub, here, depth + 1)

    walk(schema, (), 0)
    if len(out) > MAX_FIELDS:
        return None
    # Each group's fieldset closes after its last descendant (the list is in depth-first order).
    closes = [0] * len(out)
    for i, f in enumerate(out):
        if f.kind == "group":
            last = i
            for j in range(i + 1, len(out)):
                if out[j].path[: len(f.path)] != f.path:
                    break
                last = j
            closes[last] += 1
    return [replace(f, closes=c) for f, c in zip(out, closes, strict=True)]


def _json_text(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, sort_keys=True)


def _label_of(value: Any) -> str:
    return value if isinstance(value, str) else _json_text(value)


@dataclass(slots=True)
class Answer:
    """A form read back: the JSON value (when it could be read), what the reviewer typed, field
    by field, and the errors by form field name (``""``: about the answer as a whole)."""

    value: Any = None
    typed: dict[str, str] = field(default_factory=dict)
    errors: dict[str, str] = field(default_factory=dict)


def parse_json_text(text: str, *, note_key: str | None) -> Any:
    """A form's JSON answer. Empty is null. With ``note_key``, text that does not start like a
    JSON object or array is a note: ``{note_key: text}``. Raises ValueError with a reason."""
    stripped = text.strip()
    if not stripped:
        return None
    if note_key is not None and stripped[0] not in "{[":
        return {note_key: stripped}
    try:
        return loads_exact(stripped, root="$", max_depth=MAX_DEPTH)
    except orjson.JSONDecodeError as exc:
        raise ValueError(f"not valid JSON: {exc}") from None
    except JSONTooDeepError as exc:
        raise ValueError(str(exc)) from None
    except InexactNumberError as exc:
        raise ValueError(f"not JSON the server keeps exactly: {exc}") from None


def _text(form: FormData, name: str) -> str:
    value = form.get(name)
    return value if isinstance(value, str) else ""


def read_answer(form: FormData, fields: list[Field] | None, raw: str, *, note_key: str | None) -> Answer:
    """Read the answer from ``form``: the raw JSON textarea when it holds anything (or when
    there are no fields), else the fields typed by the schema (empty optional fields are left
    out; a required one left empty is left out too, and the schema check names it). ``raw`` is
    the textarea's name."""
    answer = Answer(typed={raw: _text(form, raw)})
    for f in fields or ():
        if f.kind == "group":
            continue
        answer.typed[f.name] = _text(form, f.name)
    if fields is None or answer.typed[raw].strip():
        try:
            answer.value = parse_json_text(answer.typed[raw], note_key=note_key)
        except ValueError as exc:
            answer.errors[raw] = f"The answer is {exc}"
        return answer
    value: dict[str, Any] = {}
    for f in fields:
        if f.kind == "group":
            continue
        text = answer.typed[f.name].strip()
        if not text:
            continue
        try:
            item = _typed(f, text)
        except ValueError as exc:
            answer.errors[f.name] = str(exc)
            continue
        node = value
        for key in f.path[:-1]:
            node = node.setdefault(key, {})
        node[f.path[-1]] = item
    answer.value = value
    return answer


def _typed(f: Field, text: str) -> Any:
    if f.kind in ("string", "text"):
        return text
    if f.kind == "boolean":
        if text in ("true", "false"):
            return text == "true"
        raise ValueError("choose yes or no")
    if f.kind == "enum":
        for value, _ in f.options:
            if value == text:
                return parse_json_text(value, note_key=None)
        raise ValueError("choose one of the listed values")
    if f.kind in ("number", "integer"):
        try:
            number = loads_exact(text, root="$")
        except Exception:
            number = None
        if isinstance(number, bool) or not isinstance(number, int | float):
            raise ValueError(f"{text[:40]!r} is not a number")
        if f.kind == "integer" and not isinstance(number, int):
            raise ValueError(f"{text[:40]!r} is not a whole number")
        return number
    try:
        return parse_json_text(text, note_key=None)
    except ValueError as exc:
        raise ValueError(f"this field takes JSON: {exc}") from None


def field_of(path: tuple[str | int, ...], fields: list[Field] | None, raw: str) -> str:
    """The form field a schema error's path points at (the deepest field on the path), or the
    raw textarea ``raw`` when no generated field matches."""
    if fields:
        names = {f.path: f.name for f in fields}
        for end in range(len(path), 0, -1):
            key = tuple(str(p) for p in path[:end])
            if key in names:
                return names[key]
    return raw


__all__ = [
    "MAX_FIELDS",
    "QUESTION_KEYS",
    "Answer",
    "Field",
    "field_of",
    "headline",
    "parse_json_text",
    "read_answer",
    "schema_fields",
]
