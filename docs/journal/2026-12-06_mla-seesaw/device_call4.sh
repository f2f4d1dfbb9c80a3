# Call 4: the MLA GPU tests on the kernel with bar.sync on both sides of every hand-over (call 3's "racetest"
# library, carried in variants.tar.gz), the version committed after call 3.
# device run: bash docs/journal/2026-12-06_mla-seesaw/device_call4.sh (carry cuda_impl/_build/variants.tar.gz)
set -u
export PYTHONUNBUFFERED=1 PYTHONWARNINGS=ignore::UserWarning
tar xzf cuda_impl/_build/variants.tar.gz -C cuda_impl/_build racetest/libcuda_fa.so
LIB=$(python3 -c "from cuda_impl import _lib; print(_lib.library_spec().library_path)")
mkdir -p $(dirname $LIB) && cp cuda_impl/_build/racetest/libcuda_fa.so $LIB
timeout 60 python3 -m pytest -q -p no:cacheprovider -m gpu tests/test_cuda_mla.py > $OUT/call4_pytest.log 2>&1
echo "pytest rc=$?"; tail -2 $OUT/call4_pytest.log
