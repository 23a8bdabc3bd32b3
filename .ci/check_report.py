"""Check a report folder as a user would look at it: a complete page, every image embedded, the measured section.

Usage: python .ci/check_report.py REPORT_DIR [--measured]
"""

import base64
import json
import re
import sys
from pathlib import Path

folder = Path(sys.argv[1])
page = (folder / "index.html").read_text()
summary = json.loads((folder / "summary.json").read_text())
errors = []
images = re.findall(r'src="data:image/png;base64,([^"]+)"', page)
if len(images) < 8:
    errors.append(f"only {len(images)} embedded images")
for i, data in enumerate(images):
    if not base64.b64decode(data).startswith(b"\x89PNG"):
        errors.append(f"image {i} is not a PNG")
if summary.get("failed"):
    errors.append(f"failed sections: {summary['failed']}")
if "(not run yet)" in page:
    errors.append("the page lists sections that never ran")
if "--measured" in sys.argv:
    if "Measured on this device" not in page or "measurement" not in summary:
        errors.append("the measured section is missing")
    elif not summary["measurement"].get("speedup_rows"):
        errors.append("the measured section has no speculative result")
if errors:
    sys.exit("report check failed: " + "; ".join(errors))
print(f"report ok: {len(images)} images, sections: {', '.join(summary['sections'])}")
