"""``qlsched bench``: the project's benchmark, with the raw-SQL ceiling in the same run.

It shows the speed and scale goals of docs/contract.md §10 side by side with what the same
statements reach without batching, on the same server in the same run:

* burst drain: N occurrences due at once, R ``qlsched run`` replica processes, occurrences
  admitted per second, duplicates and lost from the database, SSI retries per admit;
  the same for N triggers sharing one live cron tick;
* steady: N triggers spread over the minute, schedule lag p50/p95/p99 (database time);
* claim latency of the claim statement at 1k, 100k and 1M schedule rows in four states,
  with its plan; a replica's RSS at the smallest and the largest size;
* the ceilings: pgbench running the replicas' own claim and admit statements per
  occurrence (claim 1, admit 1), and as the replicas' rounds send them (claim k, one batch
  admit of k: the limit to approach), with the drain's ratio to each and the replicas' CPU
  per admitted occurrence;
* publish: a 100,000-trigger file, then the same file again unchanged;
* costs that must not grow: a decision a year late, readiness on a fresh connection,
  startup recovery over a large history of terminal Attempts.

Modules: ``runner`` (the order of the phases), ``session`` (options and the shared state of
one run), ``drain``, ``ceiling``, ``steady``, ``scale``, ``costs`` (one phase each),
``replicas`` (the ``qlsched run`` processes), ``machine`` (where it ran), ``results`` (what
each phase measured), ``targets`` (the goals' verdicts), ``render`` (the readable text),
``command`` (the ``qlsched bench`` command). The SQL lives in ``qlsched/tools/sql/bench*.sql``
and ``qlsched/tools/bench_data.py``, the pgbench script in ``qlsched/tools/pgbench/``.
Speed goals are shown by this benchmark, never asserted by a timed test.
"""
