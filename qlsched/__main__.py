"""``python -m qlsched``."""

from qlsched.entry import script

script()
