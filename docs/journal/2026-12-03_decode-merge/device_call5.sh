# triton:decode at f26b759 (merge of up to 16 splits x 32 columns, one program per SM for short chunks) against
# d3e47d9's (ab_base/: that commit's triton_impl, not committed), two interleaved rounds with forced split counts;
# the GPU tests of the Triton decode paths first; then the decode sweep with its peers.
# device run: FA2_GIT_COMMIT=<commit> bash <this>, carry the CUDA library.
set -u
export PYTHONUNBUFFERED=1 PYTHONWARNINGS=ignore::UserWarning
J=docs/journal/2026-12-03_decode-merge
(PYTHONPATH=. timeout 200 python3 -m pytest -q -p no:cacheprovider tests/test_triton_decode.py tests/test_triton_mla.py \
  -m gpu; PYTHONPATH=. timeout 60 python3 -m pytest -q -p no:cacheprovider tests/test_triton_limits.py) > $OUT/pytest_triton.log 2>&1
echo "pytest rc=$?"; grep -E "passed|failed" $OUT/pytest_triton.log; grep -E "FAILED|Error" $OUT/pytest_triton.log | head -10
S=1,2,3,4,8,16,32,64
for r in 1 2; do
  PYTHONPATH=ab_base:. timeout 100 python3 $J/decode_breakdown.py --backend triton --out $OUT/base$r --splits $S > $OUT/base$r.log 2>&1
  PYTHONPATH=. timeout 100 python3 $J/decode_breakdown.py --backend triton --out $OUT/new$r --splits $S > $OUT/new$r.log 2>&1
done
mkdir -p $OUT/ab
python3 - <<'PY'
import csv, os
out = os.environ["OUT"]
rows = []
for lab in ("base", "new"):
    for r in (1, 2):
        try:
            rows += [dict(row, arm=lab, round=r) for row in csv.DictReader(open(f"{out}/{lab}{r}/decode_breakdown.csv"))]
        except FileNotFoundError:
            print("missing", lab, r)
with open(f"{out}/ab/breakdown_ab.csv", "w", newline="") as f:
    w = csv.DictWriter(f, fieldnames=["arm", "round"] + [k for k in rows[0] if k not in ("arm", "round")])
    w.writeheader(); w.writerows(rows)
best = {}
for row in rows:
    key = (f"B{row['batch']} H{row['heads_kv']} S{row['seqlen_k']}", row["what"].replace("triton:decode", "tr"))
    v = float(row["us_p50"] or "nan")
    best.setdefault(key, {})[row["arm"]] = min(best.get(key, {}).get(row["arm"], v), v)
print(f"{'shape':>16} {'what':>16} {'base us':>8} {'new us':>8} {'new/base':>8}")
for (shape, what), v in best.items():
    b, n = v.get("base", float("nan")), v.get("new", float("nan"))
    print(f"{shape:>16} {what[:16]:>16} {b:8.1f} {n:8.1f} {n / b:8.3f}")
PY
for f in base1 new1 base2 new2; do echo "== $f"; cat $OUT/$f.log; done > $OUT/breakdown.log
rm -rf $OUT/base1 $OUT/base2 $OUT/new1 $OUT/new2 $OUT/base?.log $OUT/new?.log
PYTHONPATH=. timeout 200 python3 -m compare run --sweep decode --out $OUT/decode.csv --no-progress > $OUT/decode_sweep.log 2>&1
echo "sweep rc=$?"; tail -3 $OUT/decode_sweep.log
