"""The public surface of pyworkflow.contrib.langgraph, and that langgraph stays an optional extra."""

from __future__ import annotations

import subprocess
import sys

import pyworkflow.contrib.langgraph as facade

EXPECTED = [
    "DEFAULT_NO_RESPONSE_MESSAGE",
    "INTERRUPTED_TOOL_MESSAGE",
    "AgentChunk",
    "AgentResult",
    "HumanInputInterrupt",
    "HumanInputRequest",
    "HumanInputTool",
    "ScriptedChatModel",
    "human_input_tool",
    "run_agent",
    "stream_agent",
]


def test_public_names_are_pinned() -> None:
    assert facade.__all__ == EXPECTED
    public = sorted(name for name in vars(facade) if not name.startswith("_") and name != "annotations")
    assert public == sorted(EXPECTED)


def test_import_pyworkflow_does_not_import_langgraph() -> None:
    code = (
        "import sys, pyworkflow, pyworkflow.contrib\n"
        "roots = ('langgraph', 'langchain', 'langchain_core')\n"
        "loaded = sorted(m for m in sys.modules if m.split('.')[0] in roots)\n"
        "assert not loaded, loaded\n"
        "import pyworkflow.contrib.langgraph\n"
        "assert 'langgraph' in sys.modules\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)
