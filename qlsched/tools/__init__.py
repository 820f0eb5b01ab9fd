"""What serves the product without being it: the demo, the benchmark, the fleet of replica
processes they run, the exactly-once verification reads, and their own SQL.

Boundary: the runtime (``qlsched.core``, ``qlsched.postgres``, ``qlsched.cluster``) never
imports this package (a test holds the direction); the tools use the product as a user
would, through its commands, its adapter and its roles. Their SQL lives here, in
``sql/*.sql`` (named blocks loaded by ``queries.py``) and ``pgbench/``, never in the
adapter's namespace.
"""
