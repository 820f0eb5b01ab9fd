"""``python -m qlsched``."""

from qlsched.cli import main

raise SystemExit(main())
