"""Oracle of file_reorganization level 2: every file into `<extension>/<YYYY>/<MM>/`
by the date in its name (`<extension>/undated/` without a real calendar date),
.tmp files deleted. Runs in the workspace."""

import datetime
import os
import re

for name in sorted(os.listdir('.')):
    if name == 'CONTRACT.md' or not os.path.isfile(name):
        continue
    ext = name.rsplit('.', 1)[1].lower()
    if ext == 'tmp':
        os.remove(name)
        continue
    folder = os.path.join(ext, 'undated')
    m = re.search(r'(\d{4})-(\d{2})-(\d{2})', name)
    if m:
        try:
            datetime.date(int(m.group(1)), int(m.group(2)), int(m.group(3)))
            folder = os.path.join(ext, m.group(1), m.group(2))
        except ValueError:
            pass
    os.makedirs(folder, exist_ok=True)
    os.rename(name, os.path.join(folder, name))
