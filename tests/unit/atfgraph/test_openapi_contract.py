"""The OpenAPI document is the contract: every answer has a schema (no ``{}``), every error an
operation can give is declared in the one error shape (never FastAPI's ``detail``), every
operation says how it is authenticated and which roles may call it, and the enums and limits
the checks use are declared. (That live answers match: test_atfg_api_contract.py.)"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from atfgraph.server._app import Settings, create_app
from atfgraph.server._auth import RULES


@pytest.fixture
def doc(tmp_path: Path) -> dict[str, Any]:
    return create_app(Settings(db_path=str(tmp_path / "g.db"), home=tmp_path)).openapi()


def _operations(doc: dict[str, Any]) -> list[tuple[str, str, dict[str, Any]]]:
    return [(path, method, op) for path, item in doc["paths"].items() for method, op in item.items()]


def test_every_success_answer_has_a_schema(doc: dict[str, Any]) -> None:
    for path, method, op in _operations(doc):
        ok = [code for code in op["responses"] if code.startswith("2")]
        assert len(ok) == 1 or (path, method, ok) == ("/api/v2/traversers", "post", ["200", "201"])
        for code in ok:
            schema = op["responses"][code]["content"]["application/json"]["schema"]
            # one model, or (a run of either kind) one of several models
            refs = [s.get("$ref", "") for s in schema.get("anyOf", [schema])]
            assert refs and all(r.startswith("#/components/schemas/") for r in refs), (path, method, schema)


def test_errors_are_declared_in_the_one_shape(doc: dict[str, Any]) -> None:
    assert "HTTPValidationError" not in doc["components"]["schemas"]
    error = doc["components"]["schemas"]["ErrorBody"]
    assert error["required"] == ["error"]
    assert doc["components"]["schemas"]["ErrorDetail"]["required"] == ["code", "message"]
    for path, method, op in _operations(doc):
        errors = {code: answer for code, answer in op["responses"].items() if code[0] in "45"}
        assert {"400", "500", "503"} <= set(errors), (path, method)
        for answer in errors.values():
            assert answer["content"]["application/json"]["schema"] == {
                "$ref": "#/components/schemas/ErrorBody"
            }
        if "requestBody" in op:
            assert {"413", "422"} <= set(errors), (path, method)


def test_every_operation_names_its_security(doc: dict[str, Any]) -> None:
    assert doc["components"]["securitySchemes"]["bearerAuth"] == {
        "type": "http",
        "scheme": "bearer",
        "description": doc["components"]["securitySchemes"]["bearerAuth"]["description"],
    }
    ruled = {(rule.method, rule.template) for rule in RULES}
    public = []
    for path, method, op in _operations(doc):
        if op["security"] == []:
            public.append(path)
            continue
        assert op["security"] == [{"bearerAuth": []}]
        assert {"401", "403"} <= set(op["responses"]), path
        assert "**Authorization**" in op["description"], path
        template = path
        for name in ("traverser_id", "approval_id", "worker_id", "token_id", "hook_id", "run_id"):
            template = template.replace("{" + name + "}", "{id}")
        for name in ("link_id", "wait_id", "name", "scope", "key"):
            template = template.replace("{" + name + "}", "{id}")
        assert (method.upper(), template) in ruled, (method, path)
    assert sorted(public) == ["/api/v2/webhooks/{link_id}", "/livez", "/readyz"]
    decide = doc["paths"]["/api/v2/approvals/{approval_id}/decide"]["post"]["description"]
    assert "`decide`: owner, administrator, reviewer" in decide
    complete = doc["paths"]["/api/v2/traversers/{traverser_id}/complete"]["post"]["description"]
    assert "`work` (only under the task lease it holds): owner, administrator, worker" in complete


def test_enums_are_declared(doc: dict[str, Any]) -> None:
    schemas = doc["components"]["schemas"]
    assert set(schemas["TraverserStatus"]["enum"]) == {
        "queued",
        "running",
        "waiting",
        "succeeded",
        "failed",
        "cancelled",
    }
    listed = {p["name"]: p for p in doc["paths"]["/api/v2/approvals"]["get"]["parameters"]}
    assert listed["status"]["schema"]["enum"] == ["pending", "approved", "rejected", "expired", "all"]
    listed = {p["name"]: p for p in doc["paths"]["/api/v2/notifications"]["get"]["parameters"]}
    assert listed["status"]["schema"]["enum"] == ["dead", "pending", "delivered"]
