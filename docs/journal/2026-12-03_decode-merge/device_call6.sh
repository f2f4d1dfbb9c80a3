# MLA decode (triton:decode's attention_mla_decode, which shares the merge and the split plan) at the working
# tree against d3e47d9's triton_impl (ab_base/, not committed), two interleaved rounds of
# docs/journal/2026-12-02_mla/mla_speed.py.  device run: bash <this>
set -u
export PYTHONUNBUFFERED=1 PYTHONWARNINGS=ignore::UserWarning
for r in 1 2; do
  for arm in base new; do
    P=.; [ $arm = base ] && P=ab_base:.
    mkdir -p $OUT/$arm$r
    OUT=$OUT/$arm$r PYTHONPATH=$P timeout 120 python3 docs/journal/2026-12-02_mla/mla_speed.py > $OUT/$arm$r/log 2>&1 || echo "$arm$r failed"
  done
done
python3 - <<'PY'
import csv, os
out = os.environ["OUT"]
rows = []
for arm in ("base", "new"):
    for r in (1, 2):
        rows += [dict(row, arm=arm, round=r) for row in csv.DictReader(open(f"{out}/{arm}{r}/mla_speed.csv"))]
with open(f"{out}/mla_ab.csv", "w", newline="") as f:
    w = csv.DictWriter(f, fieldnames=["arm", "round"] + [k for k in rows[0] if k not in ("arm", "round")])
    w.writeheader(); w.writerows(rows)
best = {}
for row in rows:
    key = f"b{row['batch']} h{row['heads_q']} q{row['seqlen_q']} L{row['cache_len']}"
    best.setdefault(key, {})[row["arm"]] = min(best.get(key, {}).get(row["arm"], 9e9), float(row["ms_p50"]) * 1e3)
print(f"{'shape':>22} {'base us':>8} {'new us':>8} {'new/base':>8}")
for key, v in best.items():
    print(f"{key:>22} {v['base']:8.1f} {v['new']:8.1f} {v['new'] / v['base']:8.3f}")
PY
rm -rf $OUT/base? $OUT/new?
