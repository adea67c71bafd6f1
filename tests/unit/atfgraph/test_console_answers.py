"""The console's reading of a prompt (question first) and of a schema form (fields typed by the
wait's JSON Schema), and pyworkflow's schema check naming the path of what is wrong."""

from __future__ import annotations

from typing import Any

import pytest
from starlette.datastructures import FormData

from atfgraph.server.console._answers import MAX_FIELDS, field_of, headline, read_answer, schema_fields
from pyworkflow import PayloadValidationError, check_json_schema

SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["amount", "payee"],
    "properties": {
        "amount": {"type": "number"},
        "count": {"type": "integer"},
        "ok": {"type": "boolean"},
        "channel": {"enum": ["card", 2, None]},
        "payee": {
            "type": "object",
            "required": ["name"],
            "properties": {"name": {"type": "string"}, "deep": {"type": "object", "properties": {}}},
        },
        "tags": {"type": "array"},
    },
}


@pytest.mark.parametrize(
    ("prompt", "question", "rest"),
    [
        ("Refund?", "Refund?", None),
        ({"question": "Refund?", "case": 1}, "Refund?", {"case": 1}),
        ({"title": "Refund?"}, "Refund?", None),
        ({"question": "Q", "title": "T"}, "Q", {"title": "T"}),
        ({"question": 3, "title": "T"}, "T", {"question": 3}),
        ({"question": "  "}, None, {"question": "  "}),
        ([1, 2], None, [1, 2]),
        (None, None, None),
    ],
)
def test_the_question_is_a_string_prompt_or_its_question_or_title_field(
    prompt: Any, question: str | None, rest: Any
) -> None:
    assert headline(prompt) == (question, rest)


def test_a_schema_becomes_typed_fields_in_order_with_nested_groups() -> None:
    fields = schema_fields(SCHEMA)
    assert fields is not None
    shape = [(f.name, f.kind, f.required, f.closes) for f in fields]
    assert shape == [
        ("f.amount", "number", True, 0),
        ("f.count", "integer", False, 0),
        ("f.ok", "boolean", False, 0),
        ("f.channel", "enum", False, 0),
        ("f.payee", "group", True, 0),
        ("f.payee.name", "string", True, 0),
        ("f.payee.deep", "json", False, 1),  # two levels down: a JSON field; the group ends here
        ("f.tags", "json", False, 0),
    ]
    assert fields[3].options == (('"card"', "card"), ("2", "2"), ("null", "null"))
    for not_a_form in (None, {"type": "string"}, {"type": "object"}, {"type": "object", "properties": {}}):
        assert schema_fields(not_a_form) is None
    many = {"type": "object", "properties": {f"p{i}": {"type": "string"} for i in range(MAX_FIELDS + 1)}}
    assert schema_fields(many) is None


def test_a_form_is_read_back_typed_and_wrong_fields_are_errors_beside_them() -> None:
    fields = schema_fields(SCHEMA)
    form = FormData(
        [
            ("f.amount", "12.50"),
            ("f.count", "3"),
            ("f.ok", "false"),
            ("f.channel", "2"),
            ("f.payee.name", "Ann"),
            ("f.payee.deep", '{"x": [1]}'),
            ("f.tags", ""),
            ("raw", ""),
        ]
    )
    answer = read_answer(form, fields, "raw", note_key=None)
    assert answer.errors == {}
    assert answer.value == {
        "amount": 12.5,
        "count": 3,
        "ok": False,
        "channel": 2,
        "payee": {"name": "Ann", "deep": {"x": [1]}},
    }
    bad = FormData([("f.amount", "lots"), ("f.count", "2.5"), ("f.ok", "maybe"), ("f.channel", '"x"')])
    answer = read_answer(bad, fields, "raw", note_key=None)
    assert answer.errors == {
        "f.amount": "'lots' is not a number",
        "f.count": "'2.5' is not a whole number",
        "f.ok": "choose yes or no",
        "f.channel": "choose one of the listed values",
    }
    assert answer.typed["f.amount"] == "lots"  # kept for the page shown again
    # The raw box, when it holds anything, is the answer; a note without a schema.
    assert read_answer(
        FormData([("raw", '{"a": 1}'), ("f.amount", "x")]), fields, "raw", note_key=None
    ).value == {"a": 1}
    assert read_answer(FormData([("raw", "fine")]), None, "raw", note_key="note").value == {"note": "fine"}
    assert (
        "not valid JSON" in read_answer(FormData([("raw", "{x")]), None, "raw", note_key=None).errors["raw"]
    )


def test_the_schema_check_names_the_path_and_a_missing_property_and_maps_to_its_field() -> None:
    fields = schema_fields(SCHEMA)
    with pytest.raises(PayloadValidationError) as wrong:
        check_json_schema(SCHEMA, {"amount": "x", "payee": {"name": "A"}}, "the schema")
    assert wrong.value.path == ("amount",)
    assert "the schema at amount:" in str(wrong.value)
    with pytest.raises(PayloadValidationError) as missing:
        check_json_schema(SCHEMA, {"amount": 1, "payee": {}}, "the schema")
    assert missing.value.path == ("payee", "name")
    assert field_of(missing.value.path, fields, "raw") == "f.payee.name"
    with pytest.raises(PayloadValidationError) as whole:
        check_json_schema(SCHEMA, None, "the schema")
    assert whole.value.path == () and "at (root)" in str(whole.value)
    assert field_of(whole.value.path, fields, "raw") == "raw"
    assert field_of(("tags", 3), fields, "raw") == "f.tags"  # deepest field on the path
    check_json_schema(SCHEMA, {"amount": 1, "payee": {"name": "A"}}, "the schema")  # matches


def test_the_path_of_a_payload_error_crosses_a_process_boundary() -> None:
    import pickle

    exc = PayloadValidationError("wrong", path=("payee", 0))
    back = pickle.loads(pickle.dumps(exc))
    assert (type(back), back.message, back.path) == (PayloadValidationError, "wrong", ("payee", 0))
    assert PayloadValidationError().path == ()
