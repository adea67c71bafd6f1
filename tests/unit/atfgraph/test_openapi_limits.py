"""The OpenAPI document states the API's limits from the constants the checks use: the body's
size and nesting, every path parameter's length, identifier and integer fields, list lengths, and
the bounds of single fields. (That the server enforces them is in tests/acceptance/atfgraph.)"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from atfgraph._json import MAX_BODY_BYTES, MAX_DEPTH
from atfgraph.server._app import MAX_PATH_SEGMENT, Settings, create_app
from atfgraph.server._body import MAX_INT, MAX_KEY, MAX_MESSAGE, MAX_STEPS
from atfgraph.server._routes import MAX_ATTEMPTS, MAX_CLIENT_WAIT, MAX_LEASES


@pytest.fixture
def doc(tmp_path: Path) -> dict[str, Any]:
    # Generating the document opens nothing: the database is opened by the app's lifespan.
    return create_app(Settings(db_path=str(tmp_path / "g.db"), home=tmp_path)).openapi()


def _body(doc: dict[str, Any], path: str, method: str = "post") -> dict[str, Any]:
    body: dict[str, Any] = doc["paths"][f"/api/v2{path}"][method]["requestBody"]
    return body


def test_the_document_describes_the_body_limits(doc: dict[str, Any]) -> None:
    assert f"at most {MAX_BODY_BYTES} bytes (1 MiB" in doc["info"]["description"]
    assert f"nested at most {MAX_DEPTH} levels" in doc["info"]["description"]
    bodies = [
        op["requestBody"]
        for item in doc["paths"].values()
        for op in item.values()
        if isinstance(op, dict) and "requestBody" in op
    ]
    assert len(bodies) >= 12
    for body in bodies:  # every hand-read body says what it is read under
        assert f"at most {MAX_BODY_BYTES} bytes" in body["description"]
        assert f"at most {MAX_DEPTH} levels" in body["description"]


def test_every_path_parameter_is_bounded(doc: dict[str, Any]) -> None:
    seen = 0
    for path, item in doc["paths"].items():
        for op in item.values():
            for parameter in op.get("parameters", []) if isinstance(op, dict) else []:
                if parameter["in"] == "path":
                    seen += 1
                    assert parameter["schema"]["maxLength"] == MAX_PATH_SEGMENT, (path, parameter)
    assert seen >= 15


def test_fields_carry_their_bounds(doc: dict[str, Any]) -> None:
    submit = _body(doc, "/traversers")["content"]["application/json"]["schema"]["properties"]
    assert (submit["target"]["minLength"], submit["target"]["maxLength"]) == (1, MAX_KEY)
    # An optional field may be null (it counts as absent).
    attempts, null = submit["max_attempts"]["anyOf"]
    assert null == {"type": "null"}
    assert (attempts["minimum"], attempts["maximum"]) == (1, MAX_ATTEMPTS)
    assert submit["wait_seconds"]["anyOf"][0]["maximum"] == MAX_CLIENT_WAIT
    fail = _body(doc, "/traversers/{traverser_id}/fail")["content"]["application/json"]["schema"]
    assert fail["properties"]["epoch"]["maximum"] == MAX_INT
    assert fail["properties"]["steps"]["anyOf"][0]["maxItems"] == MAX_STEPS
    assert fail["properties"]["error"]["properties"]["message"]["maxLength"] == MAX_MESSAGE
    beat = _body(doc, "/workers/{worker_id}/heartbeat")["content"]["application/json"]["schema"]
    assert beat["properties"]["leases"]["anyOf"][0]["maxItems"] == MAX_LEASES
    # Query parameters were declared with their routes already.
    listed = {p["name"]: p for p in doc["paths"]["/api/v2/traversers"]["get"]["parameters"]}
    assert (listed["limit"]["schema"]["minimum"], listed["limit"]["schema"]["maximum"]) == (1, 1000)
