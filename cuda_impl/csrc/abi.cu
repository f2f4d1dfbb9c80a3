// Lets cuda_impl/_lib.py check, at load time, that its ctypes mirror of FwdParams matches.
#include "fwd_common.cuh"

extern "C" int cuda_fa_params_size() { return static_cast<int>(sizeof(FwdParams)); }
