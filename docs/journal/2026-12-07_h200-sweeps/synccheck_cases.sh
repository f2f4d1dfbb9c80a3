# synccheck, one process per sanitize case (sanitize_case.py), printing each case's verdict and error count.
export PYTHONUNBUFFERED=1 PYTHONWARNINGS=ignore::UserWarning
for i in 0 1 2 3; do
  PYTHONPATH=. timeout 60 compute-sanitizer --tool synccheck --print-limit 2 python3 $1 $i > $OUT/$2_case$i.log 2>&1
  echo "$2 case $i rc=$? $(grep -E '^(PASS|FAIL)' $OUT/$2_case$i.log | cut -c1-90) $(grep 'ERROR SUMMARY' $OUT/$2_case$i.log | head -1)"
done
