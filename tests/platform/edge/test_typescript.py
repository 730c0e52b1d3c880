"""The console's generated TypeScript types: the committed module is what the contracts say,
and each kind of schema becomes the type a reader expects."""

from pathlib import Path

from mldiag_platform.edge.typescript import HEADER, collect, default_path, typescript

ROOT = Path(__file__).resolve().parents[3]
COMMITTED = ROOT / "console" / "src" / "generated" / "contracts.ts"


def test_the_committed_types_match_the_contracts() -> None:
    assert default_path() == COMMITTED
    assert COMMITTED.exists(), "console/src/generated/contracts.ts is missing: run `make contracts`"
    assert COMMITTED.read_text() == typescript(), (
        "console/src/generated/contracts.ts differs from the contracts: if the change is "
        "intended, run `make contracts` and commit the result"
    )


def test_the_console_reads_the_generated_types() -> None:
    types = (ROOT / "console" / "src" / "types.ts").read_text()
    assert 'from "./generated/contracts"' in types
    for name in ("Run", "WorkloadEvent", "ProfilerSession", "AlertRule", "LogEntry"):
        assert f"export interface {name} " not in types, f"{name} is copied by hand again"
        assert f"  {name},\n" in types


_RUN = {
    "type": "object",
    "description": "A run.",
    "additionalProperties": False,
    "properties": {
        "name": {"type": "string", "description": "Its name."},
        "state": {"$ref": "#/$defs/State"},
        "endTime": {"anyOf": [{"type": "string", "format": "date-time"}, {"type": "null"}]},
        "labels": {"type": "object", "additionalProperties": {"type": "string"}},
        "values": {"type": "array", "items": {"anyOf": [{"type": "number"}, {"type": "null"}]}},
        "configs": {"type": "object", "additionalProperties": {"$ref": "#/$defs/JsonValue"}},
        "kind": {"const": "run"},
        "my-key": {"type": "boolean"},
    },
    "$defs": {"State": {"enum": ["ACTIVE", "DONE"], "type": "string"}, "JsonValue": {}},
}


def test_each_kind_of_schema_becomes_its_type() -> None:
    text = typescript({"Run": _RUN})
    assert text.startswith(HEADER)
    assert "/** A run. */\nexport interface Run {\n" in text
    assert "  /** Its name. */\n  name: string;\n" in text
    assert "  state: State;\n" in text
    assert "  endTime: string | null;\n" in text
    assert "  labels: { [key: string]: string };\n" in text
    assert "  values: (number | null)[];\n" in text
    assert "  configs: { [key: string]: JsonValue };\n" in text
    assert '  kind: "run";\n' in text
    assert '  "my-key": boolean;\n' in text
    assert 'export type State = "ACTIVE" | "DONE";\n' in text
    assert "export type JsonValue = string | number | boolean | null | JsonValue[]" in text


def test_a_name_two_contracts_define_differently_is_exported_once_per_contract() -> None:
    def listing(values: list[str]) -> dict[str, object]:
        return {
            "type": "object",
            "properties": {"stream": {"$ref": "#/$defs/LogStream"}, "at": {"$ref": "#/$defs/At"}},
            "$defs": {"LogStream": {"enum": values}, "At": {"type": "string"}},
        }

    named = collect({"Lines": listing(["STDOUT"]), "Files": listing(["stdout"])})
    assert set(named) == {"Lines", "Files", "LinesLogStream", "FilesLogStream", "At"}
    assert named["Lines"]["properties"]["stream"] == {"$ref": "#/$defs/LinesLogStream"}
    assert named["Files"]["properties"]["stream"] == {"$ref": "#/$defs/FilesLogStream"}
    assert named["Files"]["properties"]["at"] == {"$ref": "#/$defs/At"}
