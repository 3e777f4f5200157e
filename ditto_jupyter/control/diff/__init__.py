"""Comparing two points in time of a runtime, and listing what a checkpoint holds.

- `variables`: variables added, removed and changed, from the kernel's own summaries and
  digests (nothing is unpickled);
- `files`: workspace entries added, removed and changed, with text diffs of small files;
- `cells`: notebook cells added, removed and changed, paired by id, else aligned by nbdime
  (by their sources above a size bound, and the answer says so);
- `comparisons`: `Comparisons`, the service's part: a checkpoint or the live runtime as a
  side, the comparison of two, the contents of one;
- `report`: a comparison as plain text (`%diff`'s text form, `ditto diff`).

Importing the package loads none of them (the CLI reads `report` only).
"""
