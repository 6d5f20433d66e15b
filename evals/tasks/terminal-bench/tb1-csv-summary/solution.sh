#!/bin/bash
python3 - <<'PY'
import csv, json
totals = {}
with open("/app/sales.csv") as f:
    for row in csv.DictReader(f):
        totals[row["region"]] = totals.get(row["region"], 0) + int(row["units"]) * float(row["unit_price"])
out = {k: round(v, 2) for k, v in totals.items()}
out["_total"] = round(sum(totals.values()), 2)
json.dump(out, open("/app/summary.json", "w"), indent=2)
PY
