-- name: planner_defaults
-- Readiness's catalog joins get the planner's defaults: on a pool tuned for the claim
-- (sequential scans off), PostgreSQL 15 chose plans that outran the statement timeout.
SET enable_seqscan = on; SET plan_cache_mode = auto;

-- name: planner_restore
-- Back to the connection's own settings (those it was opened with).
RESET enable_seqscan; RESET plan_cache_mode;

-- name: readiness_facts
-- The server version, this database, the role readiness runs as (named in findings), the
-- database's owner and its pinned catalog digest (the database-wide setting only, never a
-- role's or a session's own value, which the role itself could set; NULL when missing).
SELECT pg_catalog.current_setting('server_version_num')::int AS version_num,
       d.datname::text AS database, CURRENT_USER::text AS role,
       pg_catalog.pg_get_userbyid(d.datdba)::text AS database_owner,
       (SELECT pg_catalog.substr(c, pg_catalog.length('qlsched.catalog_digest=') + 1)
          FROM pg_catalog.pg_db_role_setting AS s, pg_catalog.unnest(s.setconfig) AS c
         WHERE s.setdatabase = d.oid AND s.setrole = 0
           AND c LIKE 'qlsched.catalog\_digest=%') AS catalog_digest
  FROM pg_catalog.pg_database AS d
 WHERE d.datname = pg_catalog.current_database();

-- name: acl_entries
-- Every privilege granted on qlsched objects, the schema and this database, one row per
-- (kind, object, column, grantee, privilege, grantable). NULL ACLs are expanded to their
-- defaults with acldefault(), so an implicit PUBLIC grant (CONNECT/TEMP on a database, EXECUTE on a
-- function) shows up. Grantee 0 is PUBLIC. Grants to the object's own owner are left out.
WITH objs AS (
    SELECT 'table'::text AS kind, c.relname::text AS object, NULL::text AS col,
           COALESCE(c.relacl, pg_catalog.acldefault('r', c.relowner)) AS acl, c.relowner AS owner
      FROM pg_catalog.pg_class AS c
      JOIN pg_catalog.pg_namespace AS n ON n.oid = c.relnamespace
     WHERE n.nspname = 'qlsched' AND c.relkind IN ('r', 'p', 'v', 'm', 'S', 'f')
    UNION ALL
    SELECT 'column', c.relname::text, a.attname::text, a.attacl, c.relowner
      FROM pg_catalog.pg_attribute AS a
      JOIN pg_catalog.pg_class AS c ON c.oid = a.attrelid
      JOIN pg_catalog.pg_namespace AS n ON n.oid = c.relnamespace
     WHERE n.nspname = 'qlsched' AND a.attnum > 0 AND NOT a.attisdropped
       AND a.attacl IS NOT NULL
    UNION ALL
    SELECT 'function', p.oid::regprocedure::text, NULL,
           COALESCE(p.proacl, pg_catalog.acldefault('f', p.proowner)), p.proowner
      FROM pg_catalog.pg_proc AS p
      JOIN pg_catalog.pg_namespace AS n ON n.oid = p.pronamespace
     WHERE n.nspname = 'qlsched'
    UNION ALL
    SELECT 'schema', n.nspname::text, NULL,
           COALESCE(n.nspacl, pg_catalog.acldefault('n', n.nspowner)), n.nspowner
      FROM pg_catalog.pg_namespace AS n
     WHERE n.nspname = 'qlsched'
    UNION ALL
    SELECT 'database', d.datname::text, NULL,
           COALESCE(d.datacl, pg_catalog.acldefault('d', d.datdba)), d.datdba
      FROM pg_catalog.pg_database AS d
     WHERE d.datname = pg_catalog.current_database()
)
SELECT o.kind, o.object, o.col,
       CASE WHEN x.grantee = 0 THEN 'PUBLIC'
            ELSE (SELECT r.rolname::text FROM pg_catalog.pg_roles AS r WHERE r.oid = x.grantee)
       END AS grantee,
       x.privilege_type AS privilege, x.is_grantable AS grantable
  FROM objs AS o, LATERAL pg_catalog.aclexplode(o.acl) AS x
 WHERE x.grantee <> o.owner
 ORDER BY 1, 2, 3, 4, 5;

-- name: object_owners
-- Objects in schema qlsched not owned by qlsched_owner (and the schema itself).
SELECT c.relname::text AS object, pg_catalog.pg_get_userbyid(c.relowner)::text AS owner
  FROM pg_catalog.pg_class AS c
  JOIN pg_catalog.pg_namespace AS n ON n.oid = c.relnamespace
 WHERE n.nspname = 'qlsched' AND pg_catalog.pg_get_userbyid(c.relowner) <> 'qlsched_owner'
UNION ALL
SELECT 'schema qlsched', pg_catalog.pg_get_userbyid(n.nspowner)::text
  FROM pg_catalog.pg_namespace AS n
 WHERE n.nspname = 'qlsched' AND pg_catalog.pg_get_userbyid(n.nspowner) <> 'qlsched_owner';

-- name: role_attributes
-- The attributes of the six roles (the bootstrap makes each NOINHERIT, none privileged).
SELECT r.rolname::text AS role, r.rolsuper, r.rolinherit, r.rolcreaterole, r.rolcreatedb,
       r.rolreplication, r.rolbypassrls, r.rolcanlogin
  FROM pg_catalog.pg_roles AS r
 WHERE r.rolname IN ('qlsched_owner', 'qlsched_admin', 'qlsched_runtime',
                     'qlsched_worker_ingress', 'qlsched_observer', 'qlsched_worker')
 ORDER BY 1;

-- name: role_memberships
-- Memberships in both directions (there should be none): a qlsched role in any role (a
-- pg_* role would read around the grants), and any role in a qlsched role (it would act
-- as that role, e.g. `GRANT qlsched_runtime TO intruder`).
SELECT m.rolname::text AS member, g.rolname::text AS granted
  FROM pg_catalog.pg_auth_members AS am
  JOIN pg_catalog.pg_roles AS m ON m.oid = am.member
  JOIN pg_catalog.pg_roles AS g ON g.oid = am.roleid
 WHERE m.rolname IN ('qlsched_owner', 'qlsched_admin', 'qlsched_runtime',
                     'qlsched_worker_ingress', 'qlsched_observer', 'qlsched_worker')
    OR g.rolname IN ('qlsched_owner', 'qlsched_admin', 'qlsched_runtime',
                     'qlsched_worker_ingress', 'qlsched_observer', 'qlsched_worker')
 ORDER BY 1, 2;

-- name: runtime_settings
-- The runtime role's own settings (all databases, then this one: the caller keeps the last
-- value per name, so a per-database setting wins, as it does in the server).
SELECT pg_catalog.unnest(s.setconfig) AS setting
  FROM pg_catalog.pg_db_role_setting AS s
  JOIN pg_catalog.pg_roles AS r ON r.oid = s.setrole
  LEFT JOIN pg_catalog.pg_database AS d ON d.oid = s.setdatabase
 WHERE r.rolname = 'qlsched_runtime'
   AND (s.setdatabase = 0 OR d.datname = pg_catalog.current_database())
 ORDER BY s.setdatabase <> 0;

-- name: default_function_acl
-- Whether qlsched_owner's default privileges keep EXECUTE on new functions from PUBLIC.
SELECT EXISTS (
    SELECT 1 FROM pg_catalog.pg_default_acl AS a
      JOIN pg_catalog.pg_roles AS r ON r.oid = a.defaclrole
     WHERE r.rolname = 'qlsched_owner' AND a.defaclobjtype = 'f' AND a.defaclnamespace = 0
       AND NOT EXISTS (SELECT 1 FROM pg_catalog.aclexplode(a.defaclacl) AS x
                        WHERE x.grantee = 0)
);

-- name: unpinned_definer_functions
-- SECURITY DEFINER functions in qlsched without a pinned search_path.
SELECT p.oid::regprocedure::text
  FROM pg_catalog.pg_proc AS p
  JOIN pg_catalog.pg_namespace AS n ON n.oid = p.pronamespace
 WHERE n.nspname = 'qlsched' AND p.prosecdef
   AND NOT EXISTS (SELECT 1 FROM pg_catalog.unnest(p.proconfig) AS c
                    WHERE c LIKE 'search_path=%');

-- name: capability_version
-- The capability version, or NULL when missing ($1 = capability name). Run only when the
-- ledger exists (the table is created by the same migration).
SELECT c.version FROM qlsched.capability AS c WHERE c.name = $1;
