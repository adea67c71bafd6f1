"""Integrations with third-party agent frameworks.

Each integration lives in its own submodule and imports its framework only when that submodule is
imported, so `import pyworkflow` stays free of optional dependencies:

- `pyworkflow.contrib.langgraph`: LangGraph / LangChain agents that ask a human mid-loop
  (install the `pyworkflow-atfgraph[langgraph]` extra).
"""
