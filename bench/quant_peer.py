# quant_peer.py: a PyTorch peer for quantize_fp8 on q, k, v bf16 (2, 8192, 16, 128): the same scale groups
# (amax / 448, 1 for an all-zero group), codes e4m3 (float8_e4m3fn), per block of 128 rows of one
# (batch, head) and per (batch, head), with and without the random-sign Hadamard transform of q and k
# (an fp32 matmul by M = H diag(s) / sqrt(d)). Eager and torch.compile. Timed as hopattn-quantize-rate
# times ours: CUDA events around one call of all three tensors, 3 warm-up calls, median of 20. Run it
# on the GPU machine in the same call as `hopattn-quantize-rate` (perf-notes, session 37).
import torch

torch.manual_seed(0)
B, S, H, D = 2, 8192, 16, 128
q, k, v = (torch.randn(B, S, H, D, device="cuda", dtype=torch.bfloat16) for _ in range(3))
hadamard = torch.ones(1, 1, device="cuda")
while hadamard.shape[0] < D:
    hadamard = torch.cat([torch.cat([hadamard, hadamard], 1), torch.cat([hadamard, -hadamard], 1)], 0)
signs = torch.where(torch.rand(D, device="cuda") < 0.5, -1.0, 1.0)
M = hadamard * signs / D ** 0.5

def quantize(x, per_block, transform):
    b, s, h, d = x.shape
    x = x.float() @ M if transform else x.float()
    groups = x.view(b, s // 128, 128, h, d) if per_block else x.view(b, 1, s, h, d)
    amax = groups.abs().amax(dim=(2, 4), keepdim=True)
    scale = torch.where(amax > 0, amax / 448.0, torch.ones_like(amax))
    codes = (groups / scale).to(torch.float8_e4m3fn).view(b, s, h, d)
    return codes, scale.squeeze(4).squeeze(2)

def all_three(per_block, transform):
    return [quantize(q, per_block, transform), quantize(k, per_block, transform), quantize(v, per_block, False)]

def median_ms(fn):
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times = []
    for i in range(23):
        start.record(); fn(); stop.record(); stop.synchronize()
        if i >= 3: times.append(start.elapsed_time(stop))
    return sorted(times)[len(times) // 2]

compiled = torch.compile(all_three)
for per_block in (True, False):
    for transform in (False, True):
        name = f"{'per-block' if per_block else 'per-head'} {'hadamard' if transform else 'plain'}"
        eager = median_ms(lambda: all_three(per_block, transform))
        comp = median_ms(lambda: compiled(per_block, transform))
        print(f"torch {name:20s} eager {eager * 1e3:8.1f} us   compiled {comp * 1e3:8.1f} us")
