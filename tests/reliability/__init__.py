"""The reliability suite (issue 11 part B): trials that crash, kill, freeze and soak real
processes, and an oracle that reads the database and a side-effect ledger after each one.

- :mod:`~tests.reliability.ledger` and :mod:`~tests.reliability.oracle`: shared by every trial;
- ``local_trials``, ``celery_trials``, ``graph_trials``: crash-restart campaigns per face;
- ``leases``: SIGSTOP/SIGCONT past a lease; ``soak``: the long-running command;
- ``python -m tests.reliability`` runs the campaigns at a chosen size and prints the figures;
  the ``test_*.py`` files run the fast subset inside ``make test``.
"""
