-- name: catalog_shape
-- The shape of schema qlsched, one row (kind, object, definition) per object, grants aside
-- (acl_entries); not a table's storage parameters, which are a DBA's tuning. No parameters.
WITH rels AS (
    SELECT c.oid, c.relname::text AS relname, c.relkind, c.relpersistence, c.relrowsecurity,
           c.relforcerowsecurity, c.reloptions
      FROM pg_catalog.pg_class AS c
      JOIN pg_catalog.pg_namespace AS n ON n.oid = c.relnamespace
     WHERE n.nspname = 'qlsched'
)
SELECT 'relation' AS kind, r.relname AS object,
       pg_catalog.concat_ws(' ', 'relkind=' || r.relkind::text,
           'persistence=' || r.relpersistence::text,
           'rls=' || r.relrowsecurity::text, 'force_rls=' || r.relforcerowsecurity::text,
           CASE WHEN r.relkind = 'v'
                THEN 'options=' || COALESCE(pg_catalog.array_to_string(r.reloptions, ','), '')
           END,
           'inherits=' || COALESCE((SELECT pg_catalog.string_agg(i.inhparent::regclass::text, ','
                                            ORDER BY i.inhseqno)
                                      FROM pg_catalog.pg_inherits AS i
                                     WHERE i.inhrelid = r.oid), ''),
           'children=' || COALESCE((SELECT pg_catalog.string_agg(i.inhrelid::regclass::text, ','
                                            ORDER BY i.inhrelid::regclass::text)
                                      FROM pg_catalog.pg_inherits AS i
                                     WHERE i.inhparent = r.oid), ''),
           'disabled_internal_triggers=' || (SELECT pg_catalog.count(*)
                                               FROM pg_catalog.pg_trigger AS t
                                              WHERE t.tgrelid = r.oid AND t.tgisinternal
                                                AND t.tgenabled = 'D'),
           CASE WHEN r.relkind IN ('v', 'm') THEN 'view=' || pg_catalog.pg_get_viewdef(r.oid) END)
       AS definition
  FROM rels AS r
 WHERE r.relkind NOT IN ('i', 'I', 't')
UNION ALL
SELECT 'column', r.relname || '.' || a.attname::text,
       pg_catalog.concat_ws(' ', pg_catalog.format_type(a.atttypid, a.atttypmod),
           CASE WHEN a.attnotnull THEN 'NOT NULL' END,
           'DEFAULT ' || pg_catalog.pg_get_expr(d.adbin, d.adrelid),
           CASE WHEN a.attidentity <> '' THEN 'IDENTITY ' || a.attidentity::text END,
           CASE WHEN a.attgenerated <> '' THEN 'GENERATED ' || a.attgenerated::text END,
           CASE WHEN a.attcollation <> 0 THEN 'COLLATE ' || a.attcollation::regcollation::text END)
  FROM pg_catalog.pg_attribute AS a
  JOIN rels AS r ON r.oid = a.attrelid
  LEFT JOIN pg_catalog.pg_attrdef AS d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
 WHERE a.attnum > 0 AND NOT a.attisdropped AND r.relkind NOT IN ('i', 'I', 't', 'S')
UNION ALL
SELECT 'constraint', r.relname || '.' || k.conname::text,
       pg_catalog.pg_get_constraintdef(k.oid)
  FROM pg_catalog.pg_constraint AS k
  JOIN rels AS r ON r.oid = k.conrelid
UNION ALL
SELECT 'index', r.relname,
       pg_catalog.concat_ws(' ', pg_catalog.pg_get_indexdef(r.oid),
           CASE WHEN NOT x.indisvalid THEN 'INVALID' END,
           CASE WHEN NOT x.indisready THEN 'NOT READY' END)
  FROM pg_catalog.pg_index AS x
  JOIN rels AS r ON r.oid = x.indexrelid
UNION ALL
SELECT 'trigger', r.relname || '.' || t.tgname::text,
       pg_catalog.pg_get_triggerdef(t.oid) || ' enabled=' || t.tgenabled::text
  FROM pg_catalog.pg_trigger AS t
  JOIN rels AS r ON r.oid = t.tgrelid
 WHERE NOT t.tgisinternal
UNION ALL
SELECT 'rule', r.relname || '.' || w.rulename::text,
       pg_catalog.pg_get_ruledef(w.oid) || ' enabled=' || w.ev_enabled::text
  FROM pg_catalog.pg_rewrite AS w
  JOIN rels AS r ON r.oid = w.ev_class
 WHERE w.rulename <> '_RETURN'
UNION ALL
SELECT 'policy', r.relname || '.' || p.polname::text,
       pg_catalog.concat_ws(' ', 'cmd=' || p.polcmd::text, 'permissive=' || p.polpermissive::text,
           'roles=' || (SELECT pg_catalog.string_agg(
                                   CASE WHEN o = 0 THEN 'PUBLIC'
                                        ELSE o::regrole::text END, ',' ORDER BY o)
                          FROM pg_catalog.unnest(p.polroles) AS o),
           'using=' || pg_catalog.pg_get_expr(p.polqual, p.polrelid),
           'check=' || pg_catalog.pg_get_expr(p.polwithcheck, p.polrelid))
  FROM pg_catalog.pg_policy AS p
  JOIN rels AS r ON r.oid = p.polrelid
UNION ALL
SELECT 'function', f.oid::regprocedure::text,
       CASE WHEN f.prokind IN ('f', 'p') THEN pg_catalog.pg_get_functiondef(f.oid)
            ELSE 'prokind=' || f.prokind::text || ' ' || f.prosrc END
  FROM pg_catalog.pg_proc AS f
  JOIN pg_catalog.pg_namespace AS n ON n.oid = f.pronamespace
 WHERE n.nspname = 'qlsched'
UNION ALL
SELECT 'type', t.typname::text,
       pg_catalog.concat_ws(' ', 'typtype=' || t.typtype::text,
           'base=' || pg_catalog.format_type(t.typbasetype, t.typtypmod),
           'notnull=' || t.typnotnull::text,
           'labels=' || (SELECT pg_catalog.string_agg(e.enumlabel::text, ','
                                                      ORDER BY e.enumsortorder)
                           FROM pg_catalog.pg_enum AS e WHERE e.enumtypid = t.oid))
  FROM pg_catalog.pg_type AS t
  JOIN pg_catalog.pg_namespace AS n ON n.oid = t.typnamespace
 WHERE n.nspname = 'qlsched' AND t.typrelid = 0 AND t.typelem = 0
UNION ALL
SELECT 'event trigger', e.evtname::text,
       pg_catalog.concat_ws(' ', e.evtevent, 'enabled=' || e.evtenabled::text,
           'function=' || e.evtfoid::regprocedure::text,
           'tags=' || pg_catalog.array_to_string(e.evttags, ','))
  FROM pg_catalog.pg_event_trigger AS e;

-- name: catalog_build_set_aside
-- Inside the reference build's savepoint only (always rolled back): move the live schema out
-- of the way, so the shipped files build a pristine qlsched beside it in this transaction.
ALTER SCHEMA qlsched RENAME TO qlsched_catalog_live;

-- name: catalog_build_search_path
-- For the rest of the build's transaction: name resolution as the pinned roles see it, so
-- the definitions read back render exactly as readiness reads them.
SELECT pg_catalog.set_config('search_path', 'pg_catalog, pg_temp', true);

-- name: catalog_reference_rows
-- The recorded expected catalog (kind, object, definition).
SELECT r.kind, r.object, r.definition FROM qlsched.catalog_reference AS r;

-- name: catalog_reference_clear
DELETE FROM qlsched.catalog_reference;

-- name: catalog_reference_insert
-- Record the expected catalog: arrays $1 kinds, $2 objects, $3 definitions.
INSERT INTO qlsched.catalog_reference (kind, object, definition)
SELECT * FROM ROWS FROM (pg_catalog.unnest($1::text[]), pg_catalog.unnest($2::text[]),
                         pg_catalog.unnest($3::text[]));

-- name: catalog_digest_statement
-- The statement pinning digest $1 as this database's own setting (a superuser or the
-- database owner may change it; qlsched_owner may not), quoted by the server.
SELECT pg_catalog.format('ALTER DATABASE %I SET qlsched.catalog_digest = %L',
                         pg_catalog.current_database(), $1::text);
