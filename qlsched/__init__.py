"""qlsched: a clustered cron scheduler on PostgreSQL, embeddable in Trio services."""

__version__ = "0.1.0"
