"""Imported by every Python process started with this folder on ``PYTHONPATH``: with
``TEST_SPAN_DIR`` set, the process exports its spans there (see ``spanfile``)."""

import os

if os.environ.get("TEST_SPAN_DIR"):
    import spanfile

    spanfile.install(os.environ["TEST_SPAN_DIR"], os.environ.get("TEST_SPAN_MODE", "file"))
