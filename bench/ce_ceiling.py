"""Copy-engine NVLink ceiling between GPU 0 and 1: one direction, then both at once.

The all-reduce bench's large sizes move S bytes per link direction with both directions busy;
this measures what the copy engines reach in the same situation, as the ceiling to compare with.
Run on the GPU machine: python3 bench/ce_ceiling.py [MiB]
"""
import sys
import torch

mib = int(sys.argv[1]) if len(sys.argv) > 1 else 512
n = mib << 20
a0 = torch.empty(n, dtype=torch.uint8, device="cuda:0").random_()
b1 = torch.empty(n, dtype=torch.uint8, device="cuda:1")
a1 = torch.empty(n, dtype=torch.uint8, device="cuda:1").random_()
b0 = torch.empty(n, dtype=torch.uint8, device="cuda:0")
s0 = torch.cuda.Stream(device="cuda:0")
s1 = torch.cuda.Stream(device="cuda:1")


def timed(both, reps=10):
    for _ in range(2):
        with torch.cuda.stream(s0):
            b1.copy_(a0, non_blocking=True)
        if both:
            with torch.cuda.stream(s1):
                b0.copy_(a1, non_blocking=True)
    torch.cuda.synchronize("cuda:0"); torch.cuda.synchronize("cuda:1")
    e = [torch.cuda.Event(enable_timing=True) for _ in range(4)]
    e[0].record(s0)
    if both:
        e[2].record(s1)
    for _ in range(reps):
        with torch.cuda.stream(s0):
            b1.copy_(a0, non_blocking=True)
        if both:
            with torch.cuda.stream(s1):
                b0.copy_(a1, non_blocking=True)
    e[1].record(s0)
    if both:
        e[3].record(s1)
    torch.cuda.synchronize("cuda:0"); torch.cuda.synchronize("cuda:1")
    t0 = e[0].elapsed_time(e[1]) / reps
    out = [n / (t0 * 1e6)]
    if both:
        out.append(n / (e[2].elapsed_time(e[3]) / reps * 1e6))
    return out


print(f"CE {mib} MiB one direction: {timed(False)[0]:.1f} GB/s")
print("CE %d MiB both directions: %s GB/s per direction" % (mib, " / ".join(f"{x:.1f}" for x in timed(True))))
