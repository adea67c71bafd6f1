"""atfgraph schema migrations, one folder per dialect."""
