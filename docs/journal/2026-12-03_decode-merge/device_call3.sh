# The merge rewrite and the split rule against the previous commit's decode (ab_base/: 153ef2b's cuda_impl with
# its library, not committed), two interleaved rounds; the GPU decode tests and 60 s of kvcache fuzz first; then
# the decode sweep with its peers.  device run: FA2_GIT_COMMIT=<commit> bash <this>, carry the library.
set -u
export PYTHONUNBUFFERED=1 PYTHONWARNINGS=ignore::UserWarning
J=docs/journal/2026-12-03_decode-merge
PYTHONPATH=. python3 -c "from cuda_impl import _lib; _lib.load()" || exit 1
PYTHONPATH=. timeout 200 python3 -m pytest -q -m gpu -p no:cacheprovider tests/test_cuda_decode.py > $OUT/pytest_decode.log 2>&1
echo "pytest rc=$?"; tail -2 $OUT/pytest_decode.log; grep -E "FAILED|Error" $OUT/pytest_decode.log | head -10
PYTHONPATH=. timeout 100 python3 -m compare fuzz --backends cuda:decode --mode kvcache --budget-s 60 --out $OUT/fuzz > $OUT/fuzz.console 2>&1
echo "fuzz rc=$?"; tail -3 $OUT/fuzz.console
S=1,2,4,8,16,32,48,64
for r in 1 2; do
  PYTHONPATH=ab_base:. timeout 90 python3 $J/decode_breakdown.py --out $OUT/base$r --splits $S > $OUT/base$r.log 2>&1
  PYTHONPATH=. timeout 90 python3 $J/decode_breakdown.py --out $OUT/new$r --splits $S > $OUT/new$r.log 2>&1
done
mkdir -p $OUT/ab
python3 - <<'PY'
import csv, os
out = os.environ["OUT"]
rows = []
for lab in ("base", "new"):
    for r in (1, 2):
        for row in csv.DictReader(open(f"{out}/{lab}{r}/decode_breakdown.csv")):
            rows.append(dict(row, arm=lab, round=r))
with open(f"{out}/ab/breakdown_ab.csv", "w", newline="") as f:
    w = csv.DictWriter(f, fieldnames=["arm", "round"] + [k for k in rows[0] if k not in ("arm", "round")])
    w.writeheader(); w.writerows(rows)
best = {}
for row in rows:
    key = (f"B{row['batch']} H{row['heads_kv']} S{row['seqlen_k']}", row["what"])
    v = float(row["us_p50"] or "nan")
    best.setdefault(key, {}).setdefault(row["arm"], v)
    best[key][row["arm"]] = min(best[key][row["arm"]], v)
print(f"{'shape':>16} {'what':>22} {'base us':>8} {'new us':>8} {'new/base':>8}")
for (shape, what), v in best.items():
    print(f"{shape:>16} {what[:22]:>22} {v['base']:8.1f} {v['new']:8.1f} {v['new'] / v['base']:8.3f}")
PY
PYTHONPATH=. timeout 200 python3 -m compare run --sweep decode --out $OUT/decode.csv --no-progress > $OUT/decode_sweep.log 2>&1
echo "sweep rc=$?"; tail -4 $OUT/decode_sweep.log
for f in base1 new1 base2 new2; do echo "== $f"; cat $OUT/$f.log; done > $OUT/breakdown.log
rm -rf $OUT/base1 $OUT/base2 $OUT/new1 $OUT/new2 $OUT/base?.log $OUT/new?.log
ls $OUT $OUT/fuzz
