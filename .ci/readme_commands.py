"""Print the README's numbered setup command N (the line after '# N.' in its first bash block).

CI runs exactly what the README tells a new user to run, so the two cannot drift apart.
"""

import re
import sys
from pathlib import Path

text = (Path(__file__).resolve().parents[1] / "README.md").read_text()
block = re.search(r"```bash\n(.*?)```", text, re.S)
if block is None:
    sys.exit("README.md has no ```bash block")
lines = block.group(1).splitlines()
n = sys.argv[1]
for i, line in enumerate(lines):
    if line.startswith(f"# {n}."):
        print(lines[i + 1])
        break
else:
    sys.exit(f"README.md's first bash block has no '# {n}.' command")
