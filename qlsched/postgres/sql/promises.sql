-- name: runtime_effective_settings
-- The settings a runtime session starts with, lowest precedence first (the caller keeps the
-- last value per name, as the server applies them): this database's own (ALTER DATABASE
-- SET), the runtime role's in every database (ALTER ROLE SET), then the runtime role's in
-- this database (ALTER ROLE IN DATABASE SET). `source` names where each comes from.
SELECT pg_catalog.unnest(s.setconfig) AS setting,
       CASE WHEN s.setrole = 0 THEN 'database ' || pg_catalog.current_database()
            WHEN s.setdatabase = 0 THEN 'role qlsched_runtime'
            ELSE 'role qlsched_runtime in database ' || pg_catalog.current_database()
       END AS source
  FROM pg_catalog.pg_db_role_setting AS s
 WHERE (s.setrole = 0 AND s.setdatabase = (SELECT d.oid FROM pg_catalog.pg_database AS d
                                            WHERE d.datname = pg_catalog.current_database()))
    OR (s.setrole = (SELECT r.oid FROM pg_catalog.pg_roles AS r
                      WHERE r.rolname = 'qlsched_runtime')
        AND (s.setdatabase = 0
             OR s.setdatabase = (SELECT d.oid FROM pg_catalog.pg_database AS d
                                  WHERE d.datname = pg_catalog.current_database())))
 ORDER BY s.setrole <> 0, s.setdatabase <> 0;

-- name: observer_statement_timeout
-- The observer role's own statement_timeout in every database (the bootstrap sets it), or
-- NULL when it has none.
SELECT pg_catalog.substr(c, pg_catalog.length('statement_timeout=') + 1)
  FROM pg_catalog.pg_db_role_setting AS s
  JOIN pg_catalog.pg_roles AS r ON r.oid = s.setrole, pg_catalog.unnest(s.setconfig) AS c
 WHERE r.rolname = 'qlsched_observer' AND s.setdatabase = 0
   AND c LIKE 'statement\_timeout=%';

-- name: published_qlsched_tables
-- The publications that stream a qlsched table (named, with FOR ALL TABLES or FOR TABLES
-- IN SCHEMA qlsched): their rows would leave the grants to whoever subscribes.
SELECT p.pubname::text AS publication, p.tablename::text AS table_name
  FROM pg_catalog.pg_publication_tables AS p
 WHERE p.schemaname = 'qlsched'
 ORDER BY 1, 2;

-- name: public_large_object_functions
-- The large-object functions of this database PUBLIC may still execute (the bootstrap
-- revokes them: any role that may connect could otherwise store data outside every grant).
SELECT p.proname::text
  FROM pg_catalog.pg_proc AS p
 WHERE p.pronamespace = 'pg_catalog'::pg_catalog.regnamespace
   AND (p.proname LIKE 'lo\_%' OR p.proname IN ('loread', 'lowrite'))
   AND EXISTS (SELECT 1
                 FROM pg_catalog.aclexplode(COALESCE(p.proacl,
                                                     pg_catalog.acldefault('f', p.proowner))) AS x
                WHERE x.grantee = 0 AND x.privilege_type = 'EXECUTE')
 ORDER BY 1;
