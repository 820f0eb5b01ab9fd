-- name: login_facts
-- Who a command's DSN logs in as, once at start; $1 = the qlsched role the command needs.
-- Catalog reads only, so every role may run it, whatever the schema's state.
SELECT CURRENT_USER::text AS login,
       pg_catalog.current_database()::text AS database,
       r.rolsuper AS superuser,
       EXISTS (SELECT 1 FROM pg_catalog.pg_roles AS n WHERE n.rolname = $1) AS role_exists,
       EXISTS (SELECT 1 FROM pg_catalog.pg_roles AS n
                WHERE n.rolname = $1
                  AND pg_catalog.pg_has_role(CURRENT_USER, n.oid, 'MEMBER')) AS member,
       EXISTS (SELECT 1 FROM pg_catalog.pg_class AS c
                 JOIN pg_catalog.pg_namespace AS ns ON ns.oid = c.relnamespace
                WHERE ns.nspname = 'qlsched' AND c.relname = 'schema_migrations') AS initialised
  FROM pg_catalog.pg_roles AS r
 WHERE r.rolname = CURRENT_USER;
