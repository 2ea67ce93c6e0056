"""splice.py DOC SECTION: puts the markdown section in file SECTION (its first "## " heading
names it) into DOC: replaces the section of DOC with the same heading prefix (up to the next
"## " heading), or else inserts it before "## ETL: jsonl filter + project", or else appends it."""
import sys

doc_path, sec_path = sys.argv[1], sys.argv[2]
sec = open(sec_path).read().strip("\n").split("\n")
head = next(line for line in sec if line.startswith("## "))
key = head.split(" (")[0]  # "## Side by side: ..." without the script name
doc = open(doc_path).read().rstrip("\n").split("\n")
start = next((i for i, line in enumerate(doc) if line.startswith("## ") and line.split(" (")[0] == key), None)
if start is not None:
    end = next((i for i in range(start + 1, len(doc)) if doc[i].startswith("## ")), len(doc))
    doc[start:end] = sec + ([""] if end < len(doc) else [])
else:
    at = next((i for i, line in enumerate(doc) if line.startswith("## ETL: jsonl filter + project")), None)
    if at is None:
        doc += [""] + sec
    else:
        doc[at:at] = sec + [""]
open(doc_path, "w").write("\n".join(doc) + "\n")
