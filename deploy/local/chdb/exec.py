"""Run SQL statements in one chDB session and report each one's outcome.

    exec.py DIR < statements.json > results.json

statements.json is a JSON list of {"sql": "...", "format": "JSONCompact"}
("format" may be left out: the statement's output is then ignored). The
session keeps its databases in DIR. results.json is a list with one object
per statement, in order: {"ok": true, "out": "..."} or {"ok": false,
"error": "..."}; every statement runs, whatever the ones before did, so the
caller (sinks/chdb_test.go) sees every failure at once. Used by
deploy/local/chdb.sh exec; run with TZ=UTC.
"""

import json
import sys

from chdb import session


def main() -> int:
    if len(sys.argv) != 2:
        print("usage: exec.py DIR < statements.json", file=sys.stderr)
        return 2
    stmts = json.load(sys.stdin)
    sess = session.Session(sys.argv[1])
    results = []
    try:
        for st in stmts:
            try:
                res = sess.query(st["sql"], st.get("format") or "CSV")
                out = res.bytes().decode("utf-8", "replace") if st.get("format") else ""
                results.append({"ok": True, "out": out})
            except Exception as e:  # chdb raises ChdbError (a RuntimeError) for server errors
                results.append({"ok": False, "error": str(e)})
    finally:
        sess.close()
    json.dump(results, sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
