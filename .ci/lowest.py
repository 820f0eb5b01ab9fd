"""Print pip constraints pinning each direct dependency of pyproject.toml to its lower bound
(``trio>=0.27`` -> ``trio==0.27``), for the CI step that tests the oldest versions allowed."""

import re
import tomllib

with open("pyproject.toml", "rb") as fh:
    dependencies = tomllib.load(fh)["project"]["dependencies"]
for requirement in dependencies:
    m = re.match(r"\s*([A-Za-z0-9_.-]+)(?:\[[^\]]*\])?\s*>=\s*([^,;\s]+)", requirement)
    if m is None:
        raise SystemExit(f"no lower bound in {requirement!r}: every dependency needs one")
    print(f"{m.group(1)}=={m.group(2)}")
