"""pytest plugin (journal tool): after each test, the CUDA caching allocator's allocated / reserved bytes and the
device's free memory; the first time over 8 GiB is reserved but unallocated, the segments over 1 GiB with the
blocks still live in them and the Python stacks that allocated those. Run with
`python3 -m pytest -p memprobe` where this file is importable (PYTHONPATH); writes $OUT/memprobe.txt."""
import os

import torch

PATH = os.path.join(os.environ.get("OUT", "."), "memprobe.txt")
GiB = 1 << 30
_dumps = []


def pytest_sessionstart(session):
    if torch.cuda.is_available():
        torch.cuda.memory._record_memory_history(max_entries=100000, stacks="python")


def pytest_runtest_logfinish(nodeid, location):
    if not torch.cuda.is_available() or not torch.cuda.is_initialized():
        return
    allocated, reserved = torch.cuda.memory_allocated(), torch.cuda.memory_reserved()
    free, _ = torch.cuda.mem_get_info()
    with open(PATH, "a") as f:
        f.write(f"{nodeid}\talloc {allocated / GiB:.3f}\treserved {reserved / GiB:.3f}\tfree {free / GiB:.2f}\n")
        if reserved - allocated < 8 * GiB or len(_dumps) >= 2:
            return
        _dumps.append(nodeid)
        for seg in torch.cuda.memory._snapshot()["segments"]:
            live = [b for b in seg["blocks"] if b["state"] != "inactive"]
            if seg["total_size"] < GiB or not live:
                continue
            f.write(f"  segment {seg['total_size'] / GiB:.2f} GiB pool {seg.get('segment_pool_id')}, "
                    f"{len(live)} live blocks\n")
            for block in live[:6]:
                f.write(f"    {block['state']} {block['size']} B\n")
                for frame in block.get("frames", [])[:14]:
                    f.write(f"      {frame['filename']}:{frame['line']} {frame['name']}\n")
