-- The bench's phases at scale (`qlsched bench --scale`, qlsched.tools.bench.hundredfold).

-- name: bench_lag_histogram
-- Runs per schedule-lag bucket (queued_at_ms - scheduled_for_ms, database time) over every
-- Run in the database: bucket i counts lags in [$1[i], $1[i + 1]), the last is open-ended.
SELECT pg_catalog.array_agg(COALESCE(c.n, 0) ORDER BY b.i)::bigint[] AS counts
  FROM pg_catalog.generate_series(1, pg_catalog.cardinality($1::bigint[])) AS b(i)
  LEFT JOIN (SELECT pg_catalog.width_bucket(r.queued_at_ms - r.scheduled_for_ms,
                                            $1::bigint[]) AS i,
                    pg_catalog.count(*) AS n
               FROM qlsched.runs AS r
              GROUP BY 1) AS c ON c.i = b.i;
