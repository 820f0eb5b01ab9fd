"""``python -m qlsched``."""

from qlsched.entry import main

raise SystemExit(main())
